r"""Launch a config file's sweep: one run per point, parents before children.

  python -m experiments.launch --config=configs/X.py[:ARG] --workdir=DIR \
      [--backend=local|xm] [--parallel=N] [--processes=P] [--dry_run] [--only=NAME,...]

Each run lives in DIR/<run name> (overrides.json, log.txt, status.json and the
training workdir itself); DIR/sweep.json lists them all. `local` starts at most
N runs at a time as processes of this machine; `xm` hands the same runs to
XManager's local backend (`pip install -e '.[xm]'`). Launching again resumes:
finished runs are skipped and interrupted ones continue from their newest
checkpoint. --only runs the named runs and whatever unfinished runs they start
from. --processes=P trains each run as P processes of this machine
(`python -m moe_jax.multiprocess`, docs/multihost.md). Ctrl-C or SIGTERM asks every running run to save and stop, then exits
non-zero; a second one kills them. Exit status 0: every run is done. See docs/experiments.md.
"""
import os
import shlex
import signal
import subprocess
import sys
import time

from absl import flags
import tqdm

from experiments import hyper, runner, sweep
from moe_jax import cli, containment, lifeline
from moe_jax.errors import ConfigError

_TAIL_LINES = 8


class Progress:
  """A bar over the runs, and one line for each run that ends."""

  def __init__(self, sweep_dir, total):
    self.sweep_dir, self.outcome, self.running = sweep_dir, {}, []
    self._bar = tqdm.tqdm(total=total, unit='run', desc='runs', dynamic_ncols=True)

  def started(self, name):
    self.running.append(name)
    self._bar.set_postfix_str(f'running: {", ".join(self.running)}')

  def ended(self, name, state):
    self.outcome[name] = state
    if name in self.running:
      self.running.remove(name)
    run_dir = os.path.join(self.sweep_dir, name)
    wall = runner.status(run_dir).get('wall_s')
    line = f'{state:<12}{name}' + (f'  ({wall:.0f} s)' if wall and state != 'blocked' else '')
    if state == 'failed':
      log = os.path.join(run_dir, runner.LOG_FILE)
      line += f'; the end of {log}:\n' + '\n'.join('    ' + l for l in tail(log))
    self._bar.write(line)
    self._bar.set_postfix_str(f'running: {", ".join(self.running)}' if self.running else '')
    self._bar.update()

  def close(self):
    self._bar.close()


def tail(path, lines=_TAIL_LINES):
  """The last lines of a log, progress bars' carriage returns resolved."""
  if not os.path.exists(path):
    return []
  with open(path, 'rb') as f:
    f.seek(max(0, os.path.getsize(path) - 16384))
    text = f.read().decode(errors='replace')
  shown = [l.rstrip().split('\r')[-1] for l in text.split('\n')]
  return [l for l in shown if l.strip()][-lines:]


def run_local(sweep_dir, runs, parallel, progress, processes=1):
  """Starts each run as `python -m experiments.run`, at most `parallel` at a time."""
  todo, pending, running = {r.name for r in runs}, list(runs), {}
  stop = []

  def on_signal(signum, _):
    # The first: SIGTERM (each run saves and stops); a second: SIGKILL, whose
    # run drivers take their trainers with them (lifeline.py).
    stop.append(signum)
    for proc, _ in running.values():
      proc.send_signal(signal.SIGTERM if len(stop) == 1 else signal.SIGKILL)

  previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    while pending or running:
      for r in list(pending):
        if stop:
          break
        if runner.blocked(r, progress.outcome):
          pending.remove(r)
          progress.ended(r.name, 'blocked')
        elif runner.ready(r, progress.outcome, todo) and len(running) < parallel:
          pending.remove(r)
          before = runner.attempts(sweep_dir, r.name)
          running[r.name] = _start(sweep_dir, r.name, processes), before
          progress.started(r.name)
      for name, (proc, attempts) in list(running.items()):
        if proc.poll() is not None:
          del running[name]
          progress.ended(name, runner.outcome(sweep_dir, name, attempts))
      if stop and not running:
        break
      time.sleep(0.2)
  finally:
    for proc, _ in running.values():   # only on an error of our own: leave nothing behind
      proc.send_signal(signal.SIGTERM)
      proc.wait()
    for s, handler in previous.items():
      signal.signal(s, handler)
  return stop[0] if stop else None


def _start(sweep_dir, name, processes):
  # Its own session: a terminal's Ctrl-C reaches the launcher only, which passes it on;
  # and it dies with the launcher, SIGKILLed or not (its own children with it: runner.py).
  with open(os.path.join(sweep_dir, name, runner.LOG_FILE), 'a') as log:
    return subprocess.Popen(runner.driver_argv(sweep_dir, name, processes),
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=lifeline.preexec())


def select(sweep_dir, runs, only):
  """The runs to start: `only` (default all) and the unfinished runs they start
  from, less the runs already done."""
  by_name = {r.name: r for r in runs}
  unknown = [n for n in only if n not in by_name]
  if unknown:
    raise ConfigError(f'--only: no run named {", ".join(map(repr, unknown))} in the sweep '
                      f'(runs: {", ".join(by_name)})')
  done = {n for n in by_name if runner.status(os.path.join(sweep_dir, n)).get('state') == 'done'}
  wanted, stack = set(only or by_name), list(only or by_name)
  while stack:
    for p in by_name[stack.pop()].parents:
      if p not in wanted and p not in done:
        wanted.add(p)
        stack.append(p)
  return [r for r in runs if r.name in wanted and r.name not in done], done


def _print_plan(sweep_dir, spec, runs, todo, done, processes):
  print(f'{len(runs)} runs of {spec} in {sweep_dir}: {len(done)} done, {len(todo)} to run')
  names = {r.name for r in todo}
  for r in runs:
    state = 'done' if r.name in done else 'to run' if r.name in names else 'not selected'
    after = f'  after {", ".join(r.parents)}' if r.parents else ''
    print(f'  {r.name}  [{state}]{after}')
    if r.name in names:
      if hyper.RESUME_FROM in r.overrides:
        print(f'    resume from {sweep.resolve(r.overrides[hyper.RESUME_FROM], sweep_dir)}')
      for _, argv in runner.commands(sweep_dir, spec, r.name, r.overrides, processes):
        print('    $ ' + shlex.join(argv))


def launch(config, workdir, backend='local', parallel=1, dry_run=False, only=(), processes=1):
  """Checks everything, writes the sweep, runs what is not done; returns the exit status."""
  if backend not in ('local', 'xm'):
    raise ConfigError(f'backend={backend!r} is not one of local, xm')
  if processes < 1:
    raise ConfigError(f'processes={processes} must be at least 1')
  workdir = os.path.abspath(os.path.expanduser(workdir))
  spec, runs = sweep.plan(config)
  for r in runs:   # a checkpoint outside the sweep that a run starts from stays apart from it
    for key in (hyper.UPCYCLE_SRC, hyper.RESUME_FROM, 'config.init_from', hyper.EVAL_CKPT):
      value = r.overrides.get(key)
      if isinstance(value, str) and value and not sweep.REF.search(value):
        containment.apart(workdir, '--workdir', value, f'{key} of run {r.name!r}', 'checkpoint')
  sweep.check_workdir(workdir, spec, runs)
  todo, done = select(workdir, runs, list(only))
  if backend == 'xm':
    from experiments import xm_backend  # pylint: disable=g-import-not-at-top
    xm_backend.check_installed()
  if dry_run:
    _print_plan(workdir, spec, runs, todo, done, processes)
    return 0
  sweep.write(workdir, spec, runs)
  print(f'{len(runs)} runs in {workdir}: {len(done)} done, {len(todo)} to run '
        f'({backend}, {parallel} at a time)', flush=True)
  if not todo:
    return 0
  progress = Progress(workdir, len(todo))
  try:
    if backend == 'xm':
      signum = xm_backend.run(workdir, todo, parallel, progress, processes)
    else:
      signum = run_local(workdir, todo, parallel, progress, processes)
  finally:
    progress.close()
  if signum is not None:
    print(f'stopped by signal {signum}: the runs saved where they were; launch again to go on')
    return 128 + signum
  failed = [n for n, s in progress.outcome.items() if s != 'done']
  print(f'{len(todo) - len(failed)} of {len(todo)} runs done' +
        (f'; not done: {", ".join(failed)}' if failed else ''))
  return 1 if failed else 0


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  sys.exit(cli.run_reporting_errors(launch, f.config, f.workdir, f.backend, f.parallel,
                                    f.dry_run, f.only, f.processes))


if __name__ == '__main__':   # flags only here: a notebook imports this module as a library
  flags.DEFINE_string('config', None, 'Config file with get_config (and get_hyper): '
                      'path[:arg].', required=True)
  flags.DEFINE_string('workdir', None, 'The sweep directory: one subdirectory per run.',
                      required=True)
  flags.DEFINE_enum('backend', 'local', ['local', 'xm'], 'Who starts the runs.')
  flags.DEFINE_integer('parallel', 1, 'Runs at a time.', lower_bound=1)
  flags.DEFINE_integer('processes', 1, 'Processes per run (moe_jax.multiprocess).',
                       lower_bound=1)
  flags.DEFINE_bool('dry_run', False, 'Print the runs and their commands; write nothing.')
  flags.DEFINE_list('only', [], 'Run only these runs (and the unfinished runs they start from).')
  cli.run_app(main)
