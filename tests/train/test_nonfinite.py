"""A diverged run stops with the step named, keeping its last good checkpoint."""
import os

import pytest

from moe_jax.errors import NonFiniteLossError
from moe_jax.train import trainer
from moe_jax.workdir import checkpoint
from tests.train import tiny


def test_nonfinite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
  workdir = str(tmp_path / 'run')
  trainer.train_and_evaluate(tiny.config(total_steps=12), workdir, stop_at=3)
  # Continue with an absurd learning rate and no clipping: the loss overflows.
  diverging = tiny.config(total_steps=12, **{'opt.lr': 1e30, 'opt.clip_norm': 0.0})
  with pytest.raises(NonFiniteLossError, match=r'at step \d+'):
    trainer.train_and_evaluate(diverging, workdir)
  manager = checkpoint.Manager(os.path.join(workdir, 'checkpoints'), async_save=False)
  assert manager.latest_step() == 3
