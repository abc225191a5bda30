r"""Rerun a committed results file's runs at HEAD on this machine, and say how
far the numbers moved.

  python -m experiments.rerun --results=docs/seed000/quickstart.json [--runs=K | --only=NAME,...] \
      [--workdir=DIR] [--parallel=2] [--out=FILE] [--dry_run]

reads the sweep a results file was made by (the quickstart's summary: the
sweep of configs/quickstart.py at its `arg`; a report's results file: its
`sweep`, or for seed 000's tables experiments/seed000/table<study>.py at its
`arg`), launches its first K runs (default all; --only names them), with the
runs they start from, into DIR (default a temporary directory, removed at
the end, or by the next rerun where this one was SIGKILLed; a new or empty
one, never one inside docs/ or holding the results file), and prints per
run the committed final validation loss, today's and their difference, then
the largest drift. A run's config that differs from the committed one
(report files record it) is listed key by key: a changed default is a cause
of drift. With --out it writes that table as JSON, with provenance
(experiments/provenance.py). Two runs of one config and seed agree to the
last digit only on one commit, one machine and one XLA build: the drift
printed is what a claim must be larger than to survive a rerun.
"""
import copy
import math
import os
import re
import shutil
import tempfile

from absl import flags

from experiments import launch, provenance, report
from moe_jax import cli, containment
from moe_jax.errors import ConfigError
from moe_jax.schema import upcycle as upcycle_schema
from moe_jax.workdir import files

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PROBE_BYTES = 1 << 16   # more than a results table of a hundred runs
_OWN_WORKDIR = re.compile(r'rerun_(\d+)_\w+')


def committed(path):
  """(config spec, {run name: committed final validation loss}, {run name:
  committed config or None}) of a results file, runs in launch order."""
  if not os.path.isfile(path):
    raise ConfigError(f'--results={path} is not a file')
  saved = files.read_json(path)
  if isinstance(saved.get('losses'), dict) and 'seeds' in saved:   # experiments.quickstart
    seeds, arg = saved['seeds'], saved.get('arg')
    bad = lambda what: ConfigError(f'--results={path}: {what}')
    if not (isinstance(seeds, list) and seeds and all(_integer(s) for s in seeds)):
      raise bad(f'"seeds" must be a list of integers, not {seeds!r}')
    for arm, xs in saved['losses'].items():
      if not (isinstance(xs, list) and len(xs) == len(seeds) and all(map(_number, xs))):
        raise bad(f'"losses"."{arm}" must be a list of {len(seeds)} numbers (one a seed)')
    if arg is None:   # written before it recorded its arg: the defaults but steps, E, seeds
      for key in ('steps', 'experts'):
        if not _integer(saved.get(key)):
          raise bad(f'"{key}" must be an integer (no "arg"), not {saved.get(key)!r}')
      arg = f'steps={saved["steps"]},experts={saved["experts"]},seeds={max(seeds) + 1}'
    if not isinstance(arg, str):
      raise bad(f'"arg" must be a string, not {arg!r}')
    spec = 'configs/quickstart.py' + (f':{arg}' if arg else '')
    by_seed = {(arm, s): x for arm, xs in saved['losses'].items() for s, x in zip(seeds, xs)}
    losses = {f'{arm}_s{s}': by_seed[arm, s] for s in seeds for arm in saved['losses']}
    return spec, losses, dict.fromkeys(losses)
  runs, extra = report.read_results(path)
  for r in runs:   # what the rerun compares against, checked before it runs
    if not (isinstance(r['name'], str) and (r.get('final_val_loss') is None or
                                            _number(r['final_val_loss']))
            and isinstance(r.get('config') or {}, dict)):
      raise ConfigError(f'--results={path}: run {r["name"]!r} needs a string "name", a number '
                        'or null "final_val_loss" and an object or null "config"')
  spec = extra.get('sweep')
  if spec is not None and not isinstance(spec, str):
    raise ConfigError(f'--results={path}: "sweep" must be a string, not {spec!r}')
  if not spec and re.fullmatch(r'\w+', str(extra.get('study', ''))) and os.path.exists(
      os.path.join(_REPO, 'experiments', 'seed000', f'table{extra["study"]}.py')):
    spec = f'experiments/seed000/table{extra["study"]}.py'   # seed 000's reports named no sweep
    spec += f':{extra["arg"]}' if extra.get('arg') else ''
  if not spec:
    raise ConfigError(f'--results={path} names no sweep (key "sweep") to launch again')
  done = [r for r in runs if r.get('final_val_loss') is not None]
  return (spec, {r['name']: r['final_val_loss'] for r in done},
          {r['name']: r.get('config') for r in done})


def _integer(x):
  return isinstance(x, int) and not isinstance(x, bool)


def _number(x):
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _flat(d, prefix=''):
  out = {}
  for k, v in (d or {}).items():
    if isinstance(v, dict):
      out.update(_flat(v, f'{prefix}{k}.'))
    else:
      out[prefix + k] = v
  return out


def _as_today(config):
  """A config with the upcycle keys that became recipe args moved there
  (schema/upcycle.py: upgrade_recipe_args), and those args left out at the default they
  moved with: set or left out, the recipe reads the same value."""
  config = upcycle_schema.upgrade_recipe_args(copy.deepcopy(config))
  args = (config.get('upcycle') or {}).get('args') or {}
  for key, default in upcycle_schema.MOVED_TO_ARGS.items():
    if key in args and args[key] == default:
      del args[key]
  return config


def config_changes(old, new):
  """['key: old -> new'] of two configs (a key one of them lacks: '<none>'),
  both read as today's (`_as_today`)."""
  a, b = _flat(_as_today(old)), _flat(_as_today(new))
  return [f'{k}: {a.get(k, "<none>")} -> {b.get(k, "<none>")}'
          for k in sorted(set(a) | set(b)) if a.get(k, '<none>') != b.get(k, '<none>')]


def rerun(results, runs=0, only=(), workdir=None, parallel=1, out=None, dry_run=False):
  """Launches the chosen runs again; returns dict(results, sweep, runs=[{name,
  committed, now, drift, config_changes}], max_abs_drift). `dry_run`: prints
  the runs and their commands instead (launching and writing nothing) and
  returns None."""
  if runs < 0:
    raise ConfigError(f'--runs={runs} must be at least 1 (0: all)')
  spec, losses, configs = committed(results)
  names = list(only) or list(losses)[:runs or None]
  unknown = [n for n in names if n not in losses]
  if unknown:
    raise ConfigError(f'--only: {", ".join(unknown)} not among the runs of --results={results} '
                      f'({", ".join(losses)})')
  docs = os.path.join(_REPO, 'docs')
  for flag, path in (('--workdir', workdir), ('--out', out)):
    containment.apart(path, flag, results, '--results', 'results file')
    if path and containment.overlaps(os.path.realpath(os.path.abspath(path)),
                                     os.path.realpath(docs)):
      raise ConfigError(f'{flag}={path} lies in docs/: a rerun never writes beside the '
                        'committed results')
  if out and os.path.exists(out):
    raise ConfigError(f'--out={out} exists; remove it first')
  if workdir and os.path.exists(workdir) and (not os.path.isdir(workdir) or os.listdir(workdir)):
    # A finished sweep there would be found done and "rerun" with nothing run.
    raise ConfigError(f'--workdir={workdir} exists and is not an empty directory: a rerun '
                      'trains every run anew, into a new or empty directory')
  containment.apart(out, '--out', workdir, '--workdir', 'run directory')   # two outputs apart
  if out:
    _check_out(out)
  if dry_run:
    print(f'{results}: {len(losses)} runs of {spec}; rerun {", ".join(names)}')
    launch.launch(os.path.join(_REPO, spec), workdir or os.path.join(tempfile.gettempdir(),
                                                                     'rerun_DIR'),
                  'local', parallel, dry_run=True, only=names)
    return None
  own = workdir is None
  workdir = own_workdir() if own else workdir
  try:
    code = launch.launch(os.path.join(_REPO, spec), workdir, 'local', parallel, only=names)
    if code:
      raise ConfigError(f'the rerun of {", ".join(names)} failed (exit {code}); its logs: '
                        f'{workdir}/<run>/log.txt' + (' (removed)' if own else ''))
    now = {r['name']: r for r in report.load_runs(workdir)}
  finally:
    if own:
      shutil.rmtree(workdir, ignore_errors=True)
  rows = []
  for n in names:
    got = report.final(now[n])
    rows.append(dict(name=n, committed=losses[n], now=got, drift=got - losses[n],
                     config_changes=config_changes(configs[n], now[n]['config'])
                     if configs[n] else None))
  return dict(results=os.path.relpath(os.path.abspath(results), _REPO), sweep=spec, runs=rows,
              max_abs_drift=max(abs(r['drift']) for r in rows))


def _check_out(out):
  """--out can be written where it is: asked before the rerun, not after it.
  Its folder exists and takes a file as large as a results table (a probe
  written, synced and removed, so a read-only or full disk fails here)."""
  folder = os.path.dirname(os.path.abspath(out))
  if not os.path.isdir(folder):
    raise ConfigError(f'--out={out}: its folder {folder} does not exist or is not a directory')
  try:
    with tempfile.NamedTemporaryFile(dir=folder, prefix='.rerun_probe_') as f:
      f.write(bytes(_PROBE_BYTES))
      f.flush()
      os.fsync(f.fileno())
  except OSError as e:
    raise ConfigError(f'--out={out}: cannot write into {folder} ({e.strerror})') from None


def _running(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:   # another user's
    pass
  return True


def own_workdir():
  """A new temporary directory named after this process (rerun_PID_*), once
  those of reruns no longer running are removed: a rerun SIGKILLed runs no
  `finally`, and its runs die with it (launch.py, runner.py), but its
  directory stays until the next rerun. One whose pid runs (its rerun's, or
  a reused pid) is left alone."""
  tmp = tempfile.gettempdir()
  for entry in os.listdir(tmp):
    m = _OWN_WORKDIR.fullmatch(entry)
    if m and not _running(int(m.group(1))):
      shutil.rmtree(os.path.join(tmp, entry), ignore_errors=True)
  return tempfile.mkdtemp(prefix=f'rerun_{os.getpid()}_')


def text(res):
  out = [f'{res["results"]} ({res["sweep"]}) rerun at HEAD: final validation loss',
         f'  {"run":<28}{"committed":>12}{"now":>12}{"now - committed":>18}']
  for r in res['runs']:
    out.append(f'  {r["name"]:<28}{r["committed"]:>12.6f}{r["now"]:>12.6f}{r["drift"]:>+18.6f}')
    out += [f'    config changed: {c}' for c in r['config_changes'] or ()]
  out.append(f'largest |drift|: {res["max_abs_drift"]:.6f} over {len(res["runs"])} runs')
  return '\n'.join(out)


def main(argv):
  del argv
  f = flags.FLAGS
  res = cli.run_reporting_errors(rerun, f.results, f.runs, f.only, f.workdir, f.parallel, f.out,
                                 f.dry_run)
  if res is None:
    return
  print(text(res))   # first: a disk filled since the check loses the file, not the table
  if f.out:
    cli.run_reporting_errors(files.write_json, f.out, dict(res, provenance=provenance.record()))


if __name__ == '__main__':   # flags only here: tests import this module
  flags.DEFINE_string('results', None, 'A committed results file.', required=True)
  flags.DEFINE_integer('runs', 0, 'Rerun the first K runs (0: all).')
  flags.DEFINE_list('only', [], 'Rerun these runs (and what they start from) instead.')
  flags.DEFINE_string('workdir', None, 'Where the runs go (default: a temporary directory, '
                      'removed at the end).')
  flags.DEFINE_integer('parallel', 1, 'Runs at a time.', lower_bound=1)
  flags.DEFINE_string('out', None, 'Also write the table as JSON, with provenance.')
  flags.DEFINE_bool('dry_run', False, 'Print the runs and their commands; launch nothing.')
  cli.run_app(main)
