r"""One run of a launched sweep: its commands, its status, and running it.

`python -m experiments.run --workdir=SWEEP_DIR --run=NAME` (what both backends
start, once per run) calls `execute`: it runs the run's commands as child
processes, `python -m moe_jax.upcycle` first when the run is grown from
another run's checkpoint (and its directory has no checkpoint yet; once per
config of a chain), then `python -m moe_jax.main`, which resumes from the
newest checkpoint, then `python -m moe_jax.evaluate` for each `eval.args`
(skipped when its RUN/benchmarks.<i>.jsonl exists from an earlier attempt).
Everything, its own messages included, goes to RUN/log.txt. RUN/status.json
says where the run stands: `state` (running | done | failed | interrupted),
`attempts`, `wall_s` (summed over attempts), `pid`. `done` is written only
after every command exited 0; a relaunch skips done runs. SIGTERM or SIGINT
is passed on to the running command as SIGTERM (the trainer saves a
checkpoint and exits); then it exits with 128 + the signal number.
"""
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

from experiments import hyper, sweep
from moe_jax import lifeline
from moe_jax.errors import ConfigError
from moe_jax.workdir import files, lineage

LOG_FILE, STATUS_FILE = 'log.txt', 'status.json'
BENCHMARKS = 'benchmarks'   # RUN/benchmarks.<i>.jsonl: what the run's evaluations printed
_STAGING = '.upcycle'   # where a grown or resumed model is built before it moves into the run


def benchmark_file(run_dir, index):
  """Where the run's index-th evaluation command writes its JSON lines."""
  return os.path.join(run_dir, f'{BENCHMARKS}.{index}.jsonl')


def commands(sweep_dir, config_spec, name, overrides, processes=1):
  """[(stage, argv)]: `upcycle` for each chained upcycle config of a grown run,
  `train` (unless the run only evaluates `eval.ckpt`; as `processes` local
  processes of one run through moe_jax/multiprocess.py when more than 1),
  `evaluate` for each `eval.args` string."""
  run_dir = os.path.join(sweep_dir, name)
  stages = []
  if hyper.UPCYCLE_CONFIG in overrides:
    parts = [p.strip() for p in overrides[hyper.UPCYCLE_CONFIG].split(hyper.CHAIN)]
    src = sweep.resolve(overrides[hyper.UPCYCLE_SRC], sweep_dir)
    for i, part in enumerate(parts):
      path, colon, arg = part.partition(':')
      dst = os.path.join(run_dir, _STAGING, 'dst' if i == len(parts) - 1 else f'step{i}')
      stages.append(('upcycle', [
          sys.executable, '-m', 'moe_jax.upcycle',
          f'--config={os.path.abspath(os.path.expanduser(path))}{colon}{arg}',
          f'--src={src}', f'--dst={dst}']))
      src = dst
  if hyper.EVAL_CKPT not in overrides:
    train = [sys.executable, '-m', 'moe_jax.main', f'--config={config_spec}',
             f'--workdir={run_dir}']
    train += [sweep.flag(k, sweep.resolve(v, sweep_dir)) for k, v in overrides.items()
              if k.startswith('config.')]
    if processes > 1:
      train = [sys.executable, '-m', 'moe_jax.multiprocess', f'--processes={processes}', '--',
               *train]
    stages.append(('train', train))
  ckpt = sweep.resolve(overrides.get(hyper.EVAL_CKPT, run_dir), sweep_dir)
  evals = [a for a in overrides.get(hyper.EVAL_ARGS, '').split(hyper.EVAL_SEP) if a.strip()]
  for i, args in enumerate(evals):
    stages.append(('evaluate', [sys.executable, '-m', 'moe_jax.evaluate', f'--ckpt={ckpt}',
                                *shlex.split(args), f'--out={benchmark_file(run_dir, i)}']))
  return stages


def status(run_dir):
  return sweep.read_json(os.path.join(run_dir, STATUS_FILE), {})


def driver_argv(sweep_dir, name, processes=1):
  """The command a backend starts for one run."""
  return [sys.executable, '-m', 'experiments.run', f'--workdir={sweep_dir}', f'--run={name}',
          *([f'--processes={processes}'] if processes > 1 else [])]


def attempts(sweep_dir, name):
  return status(os.path.join(sweep_dir, name)).get('attempts', 0)


def outcome(sweep_dir, name, attempts_before):
  """done | failed | interrupted, from the status the run's process wrote."""
  record = status(os.path.join(sweep_dir, name))
  if record.get('attempts', 0) <= attempts_before or record.get('state') == 'running':
    return 'failed'   # it died before writing its status, or while running
  return record['state']


def blocked(run, ended):
  """A parent of `run` ended (in this launch) without finishing."""
  return any(p in ended and ended[p] != 'done' for p in run.parents)


def ready(run, ended, todo):
  """Every parent is done: before this launch (not in `todo`), or in it."""
  return all(p not in todo or ended.get(p) == 'done' for p in run.parents)


def check_sources(sweep_dir, name, overrides, parents):
  """Every run this one starts from finished, and every path it names exists."""
  for parent in parents:
    state = status(os.path.join(sweep_dir, parent)).get('state', 'not started')
    if state != 'done':
      raise ConfigError(f'run {name!r} starts from run {parent!r}, which is not done ({state})')
  for key, value in overrides.items():
    resolved = sweep.resolve(value, sweep_dir)
    if resolved == value:
      continue
    # upcycle.src of a merge names several runs, comma-separated.
    for path in resolved.split(',') if key == hyper.UPCYCLE_SRC else [resolved]:
      if not os.path.exists(path):
        raise ConfigError(f'{key}={path} of run {name!r} does not exist (a checkpoint its run '
                          'did not keep? keep it with config.ckpt.keep_every)')


class _Forward:
  """SIGTERM / SIGINT -> SIGTERM to the running child; no new child starts."""

  def __init__(self):
    self.signum, self.child = None, None
    for s in (signal.SIGTERM, signal.SIGINT):
      signal.signal(s, self._handle)

  def _handle(self, signum, _):
    self.signum = signum
    if self.child is not None:
      self.child.send_signal(signal.SIGTERM)

  def call(self, argv, log):
    # A new session: a terminal's Ctrl-C reaches the launcher only, which asks politely;
    # and it dies with this driver, SIGKILLed or not (lifeline.py).
    self.child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=lifeline.preexec())
    if self.signum is not None:   # arrived while it was starting
      self.child.send_signal(signal.SIGTERM)
    code = self.child.wait()
    self.child = None
    return 128 - code if code < 0 else code   # killed by a signal: the shell's convention


def _resume(step_dir, run_dir):
  """Copies another run's checkpoint (and tokenizer) into the run, where the
  trainer resumes from it. Files are hard links where the filesystem allows:
  checkpoints are never written again, and pruning one link keeps the other.
  The parent's run.json and lineage.json come too: the trainer keeps the
  recorded source and cuts the lineage at the step it resumes from, so a branch
  of an upcycled run (between checkpoints or in the run) still says what it
  grew from and after how many tokens (collect's D1)."""
  staging = os.path.join(run_dir, _STAGING)
  shutil.rmtree(staging, ignore_errors=True)
  parent = os.path.dirname(os.path.dirname(step_dir))
  for name in ('tokenizer.json', files.RUN, lineage.FILE):   # a BPE's tokenizer; the records
    if os.path.exists(os.path.join(parent, name)):
      shutil.copy(os.path.join(parent, name), run_dir)
  shutil.copytree(step_dir, os.path.join(staging, 'checkpoints', os.path.basename(step_dir)),
                  copy_function=_link_or_copy)
  os.replace(os.path.join(staging, 'checkpoints'), os.path.join(run_dir, 'checkpoints'))
  shutil.rmtree(staging)


def _link_or_copy(src, dst):
  try:
    os.link(src, dst)
  except OSError:
    shutil.copy2(src, dst)


def _graft(grown, run_dir):
  """Moves a grown workdir into the run directory, checkpoints/ last: once the
  run has checkpoints/, it holds the whole grown model."""
  for entry in sorted(os.listdir(grown), key=lambda e: e == 'checkpoints'):
    target = os.path.join(run_dir, entry)
    if os.path.isdir(target) and entry != 'checkpoints':   # left by an interrupted graft
      shutil.rmtree(target)
    os.replace(os.path.join(grown, entry), target)
  shutil.rmtree(os.path.dirname(grown))


def execute(sweep_dir, name, processes=1):
  """Runs one run to its end (its training as `processes` processes); returns
  the exit status."""
  spec = sweep.read(sweep_dir)
  entry = next((r for r in spec['runs'] if r['name'] == name), None)
  if entry is None:
    raise ConfigError(f'{sweep_dir}/{sweep.SWEEP_FILE} has no run {name!r}')
  run_dir = os.path.join(sweep_dir, name)
  stages = commands(sweep_dir, spec['config'], name, entry['overrides'], processes)
  log = open(os.path.join(run_dir, LOG_FILE), 'a')  # pylint: disable=consider-using-with
  for fd in (1, 2):   # our own messages and tracebacks go to the log too
    os.dup2(log.fileno(), fd)
  forward = _Forward()   # before the pid is published: a SIGTERM from then on is passed on
  previous = status(run_dir)
  record = dict(state='running', attempts=previous.get('attempts', 0) + 1,
                wall_s=previous.get('wall_s', 0.0), pid=os.getpid(), started=time.time())
  files.write_json(os.path.join(run_dir, STATUS_FILE), record)
  print(f'== attempt {record["attempts"]}, {time.strftime("%Y-%m-%d %H:%M:%S")}', flush=True)
  code, t0 = 0, time.time()
  try:
    check_sources(sweep_dir, name, entry['overrides'], entry['parents'])
    started = os.path.isdir(os.path.join(run_dir, 'checkpoints'))   # on an earlier attempt
    if hyper.RESUME_FROM in entry['overrides'] and not started:
      step_dir = sweep.resolve(entry['overrides'][hyper.RESUME_FROM], sweep_dir)
      print(f'resuming from {step_dir}', flush=True)
      _resume(step_dir, run_dir)
    grows = [i for i, (stage, _) in enumerate(stages) if stage == 'upcycle']
    for i, (stage, argv) in enumerate(stages):
      if forward.signum is not None:
        break
      if stage == 'upcycle' and started:
        continue
      if stage == 'upcycle' and i == grows[0]:
        shutil.rmtree(os.path.join(run_dir, _STAGING), ignore_errors=True)
        os.makedirs(os.path.join(run_dir, _STAGING))
      if stage == 'evaluate' and os.path.exists(argv[-1].partition('=')[2]):
        continue   # done on an earlier attempt (its --out appears whole)
      print(f'$ {shlex.join(argv)}', flush=True)
      code = forward.call(argv, log)
      if code or forward.signum is not None:
        break
      if stage == 'upcycle' and i == grows[-1]:
        _graft(os.path.join(run_dir, _STAGING, 'dst'), run_dir)
  except ConfigError as e:
    print(f'error: {e}', flush=True)
    code = 2
  if forward.signum is not None:
    state, code = 'interrupted', 128 + forward.signum
  else:
    state = 'failed' if code else 'done'
  record.update(state=state, exit_code=code, ended=time.time(),
                wall_s=record['wall_s'] + time.time() - t0)
  files.write_json(os.path.join(run_dir, STATUS_FILE), record)
  print(f'== {state} (exit {code})', flush=True)
  return code
