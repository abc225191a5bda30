"""SIGTERM saves a checkpoint at the current step and exits cleanly; the next
run resumes from it."""
import json
import os
import subprocess
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Sends itself SIGTERM as step N begins (when its batch is placed).
_TERM_AT_STEP = '''
import os, signal
import ml_collections
from moe_jax.train import trainer
from moe_jax.workdir import placement
from tests.train import tiny
put, calls = placement.put_batch, []
def put_then_term(*args):
  calls.append(1)
  if len(calls) == STEP:
    os.kill(os.getpid(), signal.SIGTERM)
  return put(*args)
placement.put_batch = put_then_term
c = tiny.config(**{'eval_every_steps': 0})
if GROW:
  c.upcycle.update(step=3, recipe='expand_experts', factor=2)
  c.upcycle.args = ml_collections.ConfigDict(dict(delta=0.0))
trainer.train_and_evaluate(c, WORKDIR)
print('returned')
'''


def _term_at_step(tmp_path, step, grow=False):
  workdir = str(tmp_path / 'run')
  env = dict(os.environ, PYTHONPATH=_REPO)
  script = _TERM_AT_STEP.replace('WORKDIR', repr(workdir)).replace('STEP', str(step)).replace(
      'GROW', str(grow))
  proc = subprocess.run([sys.executable, '-c', script], cwd=_REPO, env=env, capture_output=True,
                        text=True, check=False)
  steps = sorted(int(d) for d in os.listdir(os.path.join(workdir, 'checkpoints')) if d.isdigit())
  return workdir, proc, steps


def test_sigterm_saves_and_exits_cleanly(tmp_path):
  workdir, proc, steps = _term_at_step(tmp_path, 5)
  assert proc.returncode == 0 and 'returned' in proc.stdout, proc.stderr
  assert steps == [3, 5]   # the periodic one, and the one SIGTERM asked for
  # It says so: when the signal arrives, and once the save is complete.
  assert 'SIGTERM: saving a checkpoint after this step, then stopping' in proc.stderr
  assert (f'saved checkpoint 5 in {workdir}/checkpoints; the same command resumes from it'
          in proc.stderr.splitlines())
  # And it said what it was about to do when it started.
  assert 'steps    0 -> 6' in proc.stderr and f'writes   {workdir}: checkpoints/' in proc.stderr


def test_sigterm_with_nothing_unsaved_stops_at_once_not_after_the_step_compiles(tmp_path):
  """Step 4 after the tau = 3 save is the grown model's first: its train step
  compiles (a minute at the GPU workflow's size), and the state is
  checkpoint 3 until it returns; the run ends there, with no step 4."""
  _, proc, steps = _term_at_step(tmp_path, 4, grow=True)
  assert proc.returncode == 0 and 'returned' not in proc.stdout, proc.stderr
  assert steps == [3]
  assert 'SIGTERM: checkpoint 3 holds this state, nothing to save; stopping now' in proc.stderr


# Sends itself SIGTERM as the transition at tau = 3 begins, and lists what
# compiles from then on.
_TERM_AT_THE_TRANSITION = '''
import json, os, signal
import ml_collections
from moe_jax.train import program, trainer
from tests import compiles
from tests.train import tiny
upcycle, after = program.upcycle, []
def term_then_upcycle(*args, **kwargs):
  os.kill(os.getpid(), signal.SIGTERM)
  recording = compiles.recorded()
  after.append((recording, recording.__enter__()))
  return upcycle(*args, **kwargs)
program.upcycle = term_then_upcycle
c = tiny.config(**{'eval_every_steps': 0, 'checkpoint_every_steps': 0})
c.upcycle.update(step=3, recipe='expand_experts', factor=2)
c.upcycle.args = ml_collections.ConfigDict(dict(delta=0.0))
trainer.train_and_evaluate(c, WORKDIR)
after[0][0].__exit__(None, None, None)
print(json.dumps(after[0][1]))
'''


def test_sigterm_during_the_transition_saves_the_grown_model_before_its_step_compiles(tmp_path):
  """The work left after a signal at the transition is the transition's own
  programs and the save: the grown model's train step (the longest compile
  of a run, 59 s on CPU at the GPU workflow's size) is not waited for."""
  workdir = str(tmp_path / 'run')
  env = dict(os.environ, PYTHONPATH=_REPO)
  script = _TERM_AT_THE_TRANSITION.replace('WORKDIR', repr(workdir))
  proc = subprocess.run([sys.executable, '-c', script], cwd=_REPO, env=env, capture_output=True,
                        text=True, check=False)
  assert proc.returncode == 0, proc.stderr
  compiled = json.loads(proc.stdout.splitlines()[-1])
  # Without scan_layers nothing changes layout: growth, report, moments; the
  # save adds Orbax's slices of leaves replicated over the 8 test devices.
  assert [n for n in compiled if n != 'slice'] == ['transform', 'compare', 'grown_state'], compiled
  steps = sorted(int(d) for d in os.listdir(os.path.join(workdir, 'checkpoints')) if d.isdigit())
  assert steps == [3]
  assert (f'saved checkpoint 3 in {workdir}/checkpoints; the same command resumes from it'
          in proc.stderr.splitlines())
  assert 'transition at step 3' in proc.stderr   # each phase said before it ran
