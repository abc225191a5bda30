"""The `xm` backend: the sweep's runs as work units of one XManager experiment.

Each work unit is `python -m experiments.run --workdir=DIR --run=NAME` as an
`xm.binary` with `xm_local.LocalSpec()` (a local process, no docker), the
same command the local backend starts. At most `parallel` work units run at
once (a semaphore around xm's async `add` / `wait_until_complete`), each after
its parents. xm_local keeps its experiment records in
~/.xmanager/experiments.sqlite3.
"""
import asyncio
import os
import signal
import sys

from experiments import runner
from moe_jax.errors import ConfigError


def check_installed():
  try:
    from xmanager import xm, xm_local  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise ConfigError(f"--backend=xm needs XManager: pip install -e '.[xm]' ({e})") from e


def run(sweep_dir, runs, parallel, progress, processes=1):
  """Runs `runs` (parents first), each training as `processes` local
  processes; returns the signal that stopped them, or None."""
  return asyncio.run(_run(sweep_dir, runs, parallel, progress, processes))


async def _run(sweep_dir, runs, parallel, progress, processes):
  from xmanager import xm, xm_local  # pylint: disable=g-import-not-at-top
  todo = {r.name for r in runs}
  ended = {r.name: asyncio.Event() for r in runs}
  slots, stop, before = asyncio.Semaphore(parallel), [], {}
  loop = asyncio.get_running_loop()
  for s in (signal.SIGINT, signal.SIGTERM):
    loop.add_signal_handler(s, stop.append, s)

  async def one(experiment, executable, r):
    try:
      for p in r.parents:
        if p in todo:
          await ended[p].wait()
      if stop:
        return
      if runner.blocked(r, progress.outcome):
        progress.ended(r.name, 'blocked')
        return
      async with slots:
        if stop:
          return
        before[r.name] = runner.attempts(sweep_dir, r.name)
        progress.started(r.name)
        unit = await experiment.add(xm.Job(executable, xm_local.Local(), name=r.name,
                                           args=dict(workdir=sweep_dir, run=r.name,
                                                     processes=processes)))
        try:
          await unit.wait_until_complete()
        except xm.ExperimentUnitFailedError:
          pass   # its status.json says how
        progress.ended(r.name, runner.outcome(sweep_dir, r.name, before[r.name]))
    finally:
      ended[r.name].set()

  async def forward():
    # xm_local cannot stop a local binary, so a signal reaches each running run
    # by the pid its process published in status.json (then it stops its command).
    told = set()
    while not all(e.is_set() for e in ended.values()):
      for name in list(progress.running) if stop else ():
        record = runner.status(os.path.join(sweep_dir, name))
        if (name not in told and record.get('state') == 'running' and
            record.get('attempts', 0) > before[name]):
          told.add(name)
          try:
            os.kill(record['pid'], signal.SIGTERM)
          except ProcessLookupError:
            pass
      await asyncio.sleep(0.2)

  try:
    async with xm_local.create_experiment(experiment_title=f'moe_jax sweep {sweep_dir}') as e:
      [executable] = e.package([xm.binary(path=sys.executable, args=['-m', 'experiments.run'],
                                          executor_spec=xm_local.LocalSpec())])
      await asyncio.gather(forward(), *(one(e, executable, r) for r in runs))
  except RuntimeError:
    # Leaving the experiment, xm_local raises for a work unit that exited non-zero.
    if all(progress.outcome.get(r.name) == 'done' for r in runs):
      raise
  finally:
    for s in (signal.SIGINT, signal.SIGTERM):
      loop.remove_signal_handler(s)
  return stop[0] if stop else None
