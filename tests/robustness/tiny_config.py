"""The robustness suite's training config: tests/train/tiny.py, 2 steps, a
checkpoint at each (what the `trained` fixture ran)."""
from tests.train import tiny


def get_config(arg=None):
  del arg
  return tiny.config(total_steps=2, checkpoint_every_steps=1, eval_every_steps=2)
