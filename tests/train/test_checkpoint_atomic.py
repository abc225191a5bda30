"""A process killed during an async save leaves the previous checkpoint usable."""
import os
import subprocess
import sys

import jax

from moe_jax.train import trainer
from moe_jax.workdir import checkpoint
from tests.train import tiny

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Trains to step 3 (saved), then at the step-6 save starts the async write and
# SIGKILLs itself while it is in flight.
_KILL_DURING_SAVE = '''
import os, signal
from moe_jax.train import trainer
from moe_jax.workdir import checkpoint
from tests.train import tiny
save = checkpoint.Manager.save
def save_then_die(self, step, *args, **kwargs):
  save(self, step, *args, **kwargs)
  if step == 6:
    os.kill(os.getpid(), signal.SIGKILL)
checkpoint.Manager.save = save_then_die
trainer.train_and_evaluate(tiny.config(**{'ckpt.async_save': True}), WORKDIR)
'''


def test_kill_during_async_save_keeps_previous_checkpoint(tmp_path):
  workdir = str(tmp_path / 'run')
  env = dict(os.environ, PYTHONPATH=_REPO)
  proc = subprocess.run([sys.executable, '-c', _KILL_DURING_SAVE.replace('WORKDIR', repr(workdir))],
                        cwd=_REPO, env=env, check=False)
  assert proc.returncode == -9
  manager = checkpoint.Manager(os.path.join(workdir, 'checkpoints'), async_save=False)
  assert manager.latest_step() == 3
  manager.close()
  # The run resumes from step 3 and finishes.
  last = trainer.train_and_evaluate(tiny.config(), workdir)
  assert jax.numpy.isfinite(last['loss'])
  assert checkpoint.Manager(os.path.join(workdir, 'checkpoints')).latest_step() == 6
