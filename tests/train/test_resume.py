"""An interrupted run, resumed in a new process, logs exactly the losses of an
uninterrupted one (the data iterator state is checkpointed with the model)."""
import json
import os
import subprocess
import sys

from moe_jax.models import dispatch
from moe_jax.train import trainer
from tests.train import tiny

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _losses(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    rows = [json.loads(line) for line in f]
  return [(r['step'], r['loss'], r.get('val_loss')) for r in rows]


def test_resumed_run_logs_the_same_losses(tmp_path):
  straight, resumed = str(tmp_path / 'straight'), str(tmp_path / 'resumed')
  trainer.train_and_evaluate(tiny.config(), straight)
  trainer.train_and_evaluate(tiny.config(), resumed, stop_at=3)
  assert [s for s, *_ in _losses(resumed)] == [1, 2, 3]
  # The second half runs in a new process, from the checkpoint alone.
  code = ('from tests.train import tiny; from moe_jax.train import trainer; '
          f'trainer.train_and_evaluate(tiny.config(), {resumed!r})')
  env = dict(os.environ, PYTHONPATH=_REPO)
  subprocess.run([sys.executable, '-c', code], check=True, cwd=_REPO, env=env)
  assert _losses(resumed) == _losses(straight)
  assert len(_losses(straight)) == 6
  # moe.dispatch='auto' (the default) is recorded as the path that ran.
  ran = dispatch.resolve('auto')
  with open(os.path.join(straight, 'config.json')) as f:
    assert json.load(f)['moe']['dispatch'] == ran == 'grouped'   # tests run on CPU
  with open(os.path.join(straight, 'metrics.jsonl')) as f:
    assert {json.loads(line)['moe/dispatch'] for line in f} == {ran}
