"""Real runs killed, interrupted or starved in the middle of a write (hooks
given to the child process as a prelude: nothing of this is in the package),
and damaged checkpoints met on resume. Nothing may be lost."""
import json
import os
import shutil

from moe_jax.train import summary
from tests.robustness import damage, harness

CFG = os.path.join(os.path.dirname(__file__), 'tiny_config.py')

# SIGKILLs the process when it syncs the temporary file of an atomic write
# of NAME: the whole new text is written, the rename has not happened.
_KILL_AT_FSYNC = '''
import os, signal
_fsync = os.fsync
def fsync(fd):
  if os.path.basename(os.readlink(f'/proc/self/fd/{fd}')).startswith('.NAME.'):
    os.kill(os.getpid(), signal.SIGKILL)
  return _fsync(fd)
os.fsync = fsync
'''


def _main(cli, workdir, *overrides, prelude='', cwd):
  return cli.run('moe_jax.main', f'--config={CFG}', f'--workdir={workdir}', *overrides,
                 cwd=cwd, prelude=prelude, timeout=300)


def _steps(workdir):
  return sorted(int(d) for d in os.listdir(os.path.join(workdir, 'checkpoints')) if d.isdigit())


def _metrics_steps(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line)['step'] for line in f]


def test_refused_run_then_the_right_one_with_a_torn_metrics_line(cli, trained, copy_of, tmp_path):
  """Bug 1: a refusal writes no config.json, so the right command then runs;
  and the metrics line a crash tore is dropped on resume."""
  workdir = copy_of(trained)
  damage.remove(workdir, 'config.json')
  with open(os.path.join(workdir, 'metrics.jsonl'), 'a') as f:
    f.write('{"step": 3, "loss": 4.')   # killed mid-line at step 3
  before = harness.tree_digest(workdir)
  refused = _main(cli, workdir, '--config.model.d_model=64', cwd=tmp_path)
  harness.assert_one_error_line(refused, 2, r'params does not match the config')
  assert harness.tree_digest(workdir) == before
  ran = _main(cli, workdir, '--config.total_steps=3', cwd=tmp_path)
  assert ran.rc == 0, ran.stderr
  assert _steps(workdir) == [2, 3] and _metrics_steps(workdir) == [1, 2, 3]
  with open(os.path.join(workdir, 'config.json')) as f:
    assert json.load(f)['total_steps'] == 3


def test_kill_during_rewrites_loses_nothing(cli, trained, copy_of, tmp_path):
  """Bug 4: killed while rewriting metrics.jsonl on resume (a line past the
  resumed step to drop), then while rewriting config.json: both files stay
  whole, byte for byte."""
  workdir = copy_of(trained)
  with open(os.path.join(workdir, 'metrics.jsonl'), 'a') as f:
    f.write('{"step": 5, "loss": 4.0}\n')
  for name in ('metrics.jsonl', 'config.json'):
    with open(os.path.join(workdir, name), 'rb') as f:
      before = f.read()
    killed = _main(cli, workdir, '--config.total_steps=3', cwd=tmp_path,
                   prelude=_KILL_AT_FSYNC.replace('NAME', name))
    assert killed.rc == -9, killed.stderr
    with open(os.path.join(workdir, name), 'rb') as f:
      assert f.read() == before, name
  assert _steps(workdir) == [1, 2]


def test_damaged_newest_checkpoint_falls_back_then_sigint_saves(cli, trained, copy_of, tmp_path):
  """Bug 3: zeros in the newest step's params; the run says so, resumes from
  the intact step 1 and moves step 2 aside. Ctrl-C while the first step
  compiles: the step finishes, is saved, and the run exits 0."""
  workdir = copy_of(trained)
  damage.zeros_in_params(workdir, 2)
  sigint_at_first_batch = '''
import signal
from moe_jax.workdir import placement
_put = placement.put_batch
def put(*args):
  signal.raise_signal(signal.SIGINT)
  placement.put_batch = _put
  return _put(*args)
placement.put_batch = put
'''
  ran = _main(cli, workdir, '--config.total_steps=5', cwd=tmp_path,
              prelude=sigint_at_first_batch)
  assert ran.rc == 0, ran.stderr
  assert 'Traceback' not in ran.stderr
  assert 'checkpoints/2 cannot be read' in ran.stderr and 'resuming from step 1' in ran.stderr
  assert 'interrupted: saving a checkpoint after this step' in ran.stderr
  assert _steps(workdir) == [1, 2]   # step 2 saved anew by the interrupted run
  assert os.path.isdir(os.path.join(workdir, 'checkpoints', '2.corrupt'))
  assert _metrics_steps(workdir) == [1, 2]


def test_sigint_before_the_loop_and_twice_exits_quietly(cli, trained, copy_of, tmp_path):
  """Ctrl-C before the loop (here: while the state is initialised) and a
  second Ctrl-C in it: one line, exit 130, no traceback; the first writes
  nothing at all. raise_signal's handler has run when it returns (the fork
  server gives each child Python's Ctrl-C handler, even under a parent that
  ignores SIGINT).
  """
  init_interrupted = '''
import signal
from moe_jax.train import program
def init_state(*args):
  signal.raise_signal(signal.SIGINT)
program.init_state = init_state
'''
  result = _main(cli, tmp_path / 'new', cwd=tmp_path, prelude=init_interrupted)
  assert (result.rc, result.stderr) == (130, 'interrupted\n')
  assert os.listdir(tmp_path) == []
  workdir = copy_of(trained)
  twice = '''
import signal
from moe_jax.workdir import placement
def put(*args):
  signal.raise_signal(signal.SIGINT)
  signal.raise_signal(signal.SIGINT)
placement.put_batch = put
'''
  result = _main(cli, workdir, '--config.total_steps=5', cwd=tmp_path, prelude=twice)
  assert result.rc == 130 and result.stderr.endswith('\ninterrupted\n'), result.stderr
  assert 'Traceback' not in result.stderr and _steps(workdir) == [1, 2]


def test_disk_full_during_an_async_save_is_one_line(cli, trained, copy_of, tmp_path):
  """The step-3 save fails in Orbax's background thread with ENOSPC: one
  error line naming the step and the newest complete one, exit 1."""
  workdir = copy_of(trained)
  disk_full_at_step_3 = '''
import errno
import orbax.checkpoint as ocp
_save = ocp.JsonCheckpointHandler._save_fn
async def save(self, x, directory):
  if '/3.orbax-checkpoint-tmp' in str(directory):
    raise OSError(errno.ENOSPC, 'No space left on device')
  return await _save(self, x, directory)
ocp.JsonCheckpointHandler._save_fn = save
'''
  result = _main(cli, workdir, '--config.total_steps=3', '--config.ckpt.async_save=True',
                 cwd=tmp_path, prelude=disk_full_at_step_3)
  # The start summary and the progress bar's lines, then the one error line.
  result.stderr = _without_progress(result.stderr)
  harness.assert_one_error_line(
      result, 1, r'saving checkpoint .*checkpoints/3 failed \(\[Errno 28\] No space left on '
      r'device\); the newest complete checkpoint is step 2')
  assert _steps(workdir) == [1, 2]


def _without_progress(stderr):
  """stderr less the trainer's start summary and progress bar."""
  return ''.join(line for line in stderr.splitlines(True) if line.strip() and not (
      line.startswith('train:') or line.split(' ', 1)[0] in summary.LABELS))


def test_a_really_full_disk_is_one_line(cli, trained, tmp_path, small_filesystem):
  """The same on a filesystem that fills up: TensorStore, Orbax's threads and
  tensorboardX all fail at once; one line says so."""
  used = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(trained)
             for n in names)
  workdir = os.path.join(small_filesystem(used + 400_000), 'run')
  shutil.copytree(trained, workdir)
  result = _main(cli, workdir, '--config.total_steps=3', '--config.ckpt.async_save=True',
                 cwd=tmp_path)
  result.stderr = _without_progress(result.stderr)
  harness.assert_one_error_line(result, 1, r'No space left on device')
  assert _steps(workdir) == [1, 2]


def test_upcycle_killed_between_the_renames_of_overwrite(cli, trained, tmp_path):
  """Bug 7: --overwrite killed after the old --dst was moved aside, before
  the new one took its place. The next command finishes the replacement
  (saying so) before it looks at --dst."""
  dst = tmp_path / 'grown'
  (dst / 'checkpoints').mkdir(parents=True)
  (dst / 'old.txt').write_text('old')
  source = harness.tree_digest(trained)
  kill_after_moving_dst_aside = '''
import os, signal
_rename = os.rename
def rename(src, dst):
  _rename(src, dst)
  if str(dst).endswith('.moe_jax-old'):
    os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
'''
  # delta=0: the trained source has no router bias to perturb.
  up = [f'--config={harness.CONFIGS}/upcycle/expand_experts.py:delta=0', f'--src={trained}',
        f'--dst={dst}']
  killed = cli.run('moe_jax.upcycle', *up, '--overwrite', cwd=tmp_path, timeout=300,
                   prelude=kill_after_moving_dst_aside)
  assert killed.rc == -9, killed.stderr
  assert sorted(os.listdir(tmp_path)) == ['grown.moe_jax-new', 'grown.moe_jax-old']
  again = cli.run('moe_jax.upcycle', *up, cwd=tmp_path)
  assert again.rc == 2 and 'finished publishing' in again.stderr, again.stderr
  assert again.stderr.strip().splitlines()[-1].endswith('exists; pass --overwrite to replace it')
  assert os.listdir(tmp_path) == ['grown']
  assert sorted(os.listdir(dst)) == ['checkpoints', 'config.json', 'lineage.json', 'run.json',
                                     'upcycle_report.json']
  assert harness.tree_digest(trained) == source
