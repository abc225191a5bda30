"""SIGTERM saves a checkpoint at the current step and exits cleanly; the next
run resumes from it."""
import os
import subprocess
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Sends itself SIGTERM while step 4 is running (when its batch is placed).
_TERM_AT_STEP_4 = '''
import os, signal
from moe_jax.train import trainer
from moe_jax.workdir import placement
from tests.train import tiny
put, calls = placement.put_batch, []
def put_then_term(*args):
  calls.append(1)
  if len(calls) == 4:
    os.kill(os.getpid(), signal.SIGTERM)
  return put(*args)
placement.put_batch = put_then_term
trainer.train_and_evaluate(tiny.config(**{'eval_every_steps': 0}), WORKDIR)
print('returned')
'''


def test_sigterm_saves_and_exits_cleanly(tmp_path):
  workdir = str(tmp_path / 'run')
  env = dict(os.environ, PYTHONPATH=_REPO)
  proc = subprocess.run([sys.executable, '-c', _TERM_AT_STEP_4.replace('WORKDIR', repr(workdir))],
                        cwd=_REPO, env=env, capture_output=True, text=True, check=False)
  assert proc.returncode == 0 and 'returned' in proc.stdout, proc.stderr
  steps = sorted(int(d) for d in os.listdir(os.path.join(workdir, 'checkpoints')) if d.isdigit())
  assert steps == [3, 4]   # the periodic one, and the one SIGTERM asked for
  # It says so: when the signal arrives, and once the save is complete.
  assert 'SIGTERM: saving a checkpoint after this step, then stopping' in proc.stderr
  assert (f'saved checkpoint 4 in {workdir}/checkpoints; the same command resumes from it'
          in proc.stderr.splitlines())
  # And it said what it was about to do when it started.
  assert 'steps    0 -> 6' in proc.stderr and f'writes   {workdir}: checkpoints/' in proc.stderr
