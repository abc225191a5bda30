r"""A sweep's runs side by side: one table and a few plots, also while they run.

  python -m experiments.report --workdir=DIR [--metric=val_loss] [--by=KEY ...]
  python -m experiments.report --results=DIR/results.json [--out=DIR2]

writes DIR/report.md (and prints it), DIR/plots/*.png (loss curves of all
runs on one axis, and per MoE run a heatmap of expert load per layer over
steps) and DIR/results.json: per run its name, overrides, config hash, seed,
steps, tokens, final train and validation loss, upcycle report and the
logged rows the table and plots read (kilobytes). DIR is a launched sweep
(DIR/sweep.json) or any directory of workdirs. With `--results` the table is
rebuilt from that file alone (printed; with `--out` also report.md and the
plots there), which is how docs tables are checked
(`python -m experiments.check_docs`). From Python:

  from experiments import report
  runs = report.load_runs(DIR)        # one dict per run (keys: see load_runs)
  report.final(run)                   # its last val_loss once done, else None
  text = report.write(DIR)            # report.md, plots, results.json; returns the markdown
  runs, extra = report.read_results(PATH)   # the runs of a results file
"""
import hashlib
import json
import math
import os
import re
import sys
import time

from absl import app, flags

from experiments import hyper, plots, provenance, runner, sweep
from moe_jax import cli, containment
from moe_jax.errors import ConfigError
from moe_jax.workdir import files

REPORT_FILE, PLOTS_DIR, RESULTS_FILE = 'report.md', 'plots', 'results.json'
# The logged keys a results file keeps: everything but the per-layer MoE
# diagnostics, of which it keeps the ones reports read (load, CV, dead experts).
_DROPPED = re.compile(r'moe/layers_\d+/(?!load$|cv$|dead$).*')


def load_runs(sweep_dir):
  """One dict per run, in the sweep's order:

    name, state (not started | running | done | failed | interrupted),
    overrides (the sweep point), parents, config (config.json, or None before
    the run wrote it), metrics (metrics.jsonl rows), step (last logged),
    total_steps, tokens (trained by this run: its steps * batch_size * seq_len),
    tokens_total (with the tokens of the runs it started from, up to the step
    it started from), start_step (where its step 0 lies on the sweep's common
    step axis: the step it grew from), wall_s, upcycle (upcycle_report.json, or
    None), upcycle_jump (loss after - loss before the transition).
  """
  if not os.path.isdir(sweep_dir):
    raise ConfigError(f'--workdir={sweep_dir} is not a directory')
  saved = sweep.read_json(os.path.join(sweep_dir, sweep.SWEEP_FILE))
  if not saved and os.path.exists(os.path.join(sweep_dir, files.CONFIG)):
    raise ConfigError(f'--workdir={sweep_dir} is a training workdir, not a sweep: pass the '
                      'directory that holds it')
  entries = saved['runs'] if saved else [
      dict(name=n, overrides={}, parents=[]) for n in sorted(os.listdir(sweep_dir))
      if n not in sweep.RESERVED and os.path.exists(os.path.join(sweep_dir, n, files.CONFIG))]
  if not entries:
    raise ConfigError(f'--workdir={sweep_dir} is neither a sweep (no {sweep.SWEEP_FILE}) nor '
                      'a directory of workdirs (no <run>/config.json)')
  for e in entries:
    if not os.path.isdir(os.path.join(sweep_dir, e['name'])):
      raise ConfigError(f'run {e["name"]!r} of {sweep_dir}/{sweep.SWEEP_FILE}: '
                        f'{os.path.join(sweep_dir, e["name"])} is missing (deleted or moved?)')
  runs, prefix = {}, {}   # prefix: tokens trained before the run's step 0, on its lineage
  for e in entries:
    run = _load_run(os.path.join(sweep_dir, e['name']), e)
    prefix[run['name']] = 0
    start = _start(e['overrides'])
    if start and start[1] in runs:
      key, parent, step = start[0], runs[start[1]], start[2]
      step = (parent['total_steps'] or 0) if step is None else step
      if key == hyper.RESUME_FROM:   # it counts steps on from the parent's step 0
        prefix[run['name']] = prefix[parent['name']]
        run['start_step'] = parent['start_step']
        run['tokens'] = max(run['step'] - step, 0) * run['tokens_per_step']
      else:
        prefix[run['name']] = prefix[parent['name']] + step * parent['tokens_per_step']
        run['start_step'] = parent['start_step'] + step
    run['tokens_total'] = prefix[run['name']] + run['step'] * run['tokens_per_step']
    runs[run['name']] = run
  return list(runs.values())


def table(runs, metric='val_loss', by=()):
  """(header, rows) of the report: the override columns (`by`, default the keys
  that vary), then state, progress, final and best `metric`, tokens, wall time
  and the upcycle loss jump. With `by`, rows are sorted by those keys."""
  keys = _columns(runs, by)
  short = sweep.labels(keys)
  unit = ' (nats/token)' if 'loss' in metric else ''
  header = (['run'] + [short[k] for k in keys] +
            ['state', 'progress (steps)', f'{metric}{unit}', f'best {metric}{unit}', 'tokens',
             'wall (h/m/s)', 'upcycle jump (nats)'])
  if by:
    runs = sorted(runs, key=lambda r: [_order(r['overrides'].get(k)) for k in keys])
  rows = []
  for r in runs:
    values = [row[metric] for row in r['metrics'] if metric in row]
    rows.append([r['name']] + [sweep.short(r['overrides'].get(k, '')) for k in keys] + [
        r['state'], f'{r["step"]}/{r["total_steps"] or "?"}',
        _cell(values[-1] if values else ''), _cell(min(values) if values else ''),
        _tokens(r['tokens'], r['tokens_total']), _duration(r['wall_s']),
        _cell('' if r['upcycle_jump'] is None else r['upcycle_jump'], signed=True)])
  return header, rows


def markdown(header, rows):
  widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
  line = lambda cells: '| ' + ' | '.join(str(c).ljust(w) for c, w in zip(cells, widths)) + ' |'
  return '\n'.join([line(header), line(['-' * w for w in widths])] + [line(r) for r in rows])


def write(sweep_dir, metric='val_loss', by=(), runs=None, results_file=True):
  """Writes report.md, plots/*.png and results.json into `sweep_dir` (the
  runs: `load_runs(sweep_dir)` unless given); returns the markdown."""
  if runs is None:
    runs = load_runs(sweep_dir)
    for r in runs:   # the report lives beside the runs, never in one (a link included)
      for out, flag in ((os.path.join(sweep_dir, PLOTS_DIR), 'the plots directory'),
                        (os.path.join(sweep_dir, REPORT_FILE), 'the report')):
        containment.apart(out, flag, os.path.join(sweep_dir, r['name']), f'run {r["name"]!r}',
                          'workdir')
  logged = sorted({k for r in runs for row in r['metrics'] for k in row})
  if logged and metric not in logged:
    raise ConfigError(f'--metric={metric} is logged by no run (metrics: {", ".join(logged)})')
  if results_file:
    write_results(os.path.join(sweep_dir, RESULTS_FILE), runs, metric=metric, by=list(by))
  text, pngs = render(runs, metric, by, os.path.join(sweep_dir, PLOTS_DIR))
  text = (f'# {os.path.basename(sweep_dir.rstrip("/"))}: {len(runs)} runs, '
          f'{time.strftime("%Y-%m-%d %H:%M")}\n\n{text}\n\n' +
          '\n'.join(f'![{os.path.basename(p)}]({PLOTS_DIR}/{os.path.basename(p)})' for p in pngs)
          + '\n')
  files.write_text(os.path.join(sweep_dir, REPORT_FILE), text)
  return text


def rebuild(path, out=None):
  """The report of a results file alone: the table (returned), and with
  `out` report.md and the plots written there (never over the results file)."""
  runs, extra = read_results(path)
  if out is None:
    return render(runs, extra.get('metric', 'val_loss'), tuple(extra.get('by', ())))[0]
  if os.path.abspath(os.path.join(out, REPORT_FILE)) == os.path.abspath(path):
    raise ConfigError(f'--out={out} would overwrite --results={path}')
  return write(out, extra.get('metric', 'val_loss'), tuple(extra.get('by', ())), runs=runs,
               results_file=False)


def results(runs, **extra):
  """A results file's content (JSON-ready): dict(runs=[...], provenance,
  **extra), each run the dict of `load_runs` with its logged rows thinned
  (_DROPPED) and config_hash, seed, final_loss and final_val_loss added."""
  slim = []
  for r in runs:
    metrics = [{k: v for k, v in row.items() if not _DROPPED.fullmatch(k)} for row in r['metrics']]
    config = r['config']
    last = lambda key: next((row[key] for row in reversed(metrics) if key in row), None)
    slim.append(dict(
        r, metrics=metrics, seed=(config or {}).get('seed'),
        config_hash=hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
        if config else None, final_loss=last('loss'), final_val_loss=last('val_loss')))
  return dict(extra, runs=slim, provenance=provenance.record())


def write_results(path, runs, **extra):
  """Writes `results` to `path`, with the spec of the sweep it lies in (`sweep`:
  what experiments.rerun launches again)."""
  files.write_json(path, results(runs, sweep=sweep.repo_spec(os.path.dirname(path)), **extra))


def read_results(path):
  """(runs, extra) of a results file written by `write_results`."""
  if not os.path.isfile(path):
    raise ConfigError(f'--results={path} is not a file')
  saved = files.read_json(path)
  runs = saved.pop('runs', None)
  if not isinstance(runs, list) or not all(isinstance(r, dict) and 'name' in r for r in runs):
    raise ConfigError(f'--results={path} has no list of runs (key "runs")')
  return runs, saved


def render(runs, metric='val_loss', by=(), plot_dir=None):
  """(markdown table, plot paths written into `plot_dir`, if given)."""
  text = markdown(*table(runs, metric, by))
  if plot_dir is None:
    return text, []
  os.makedirs(plot_dir, exist_ok=True)
  pngs = [plots.loss_curves(runs, metric, os.path.join(plot_dir, 'loss.png'))]
  pngs += [plots.expert_load(r, os.path.join(plot_dir, f'load_{r["name"]}.png'))
           for r in runs if plots.has_load(r)]
  return text, pngs


def from_results(path):
  """The table of a results file, as `write` made it (its metric and by)."""
  runs, extra = read_results(path)
  return render(runs, extra.get('metric', 'val_loss'), tuple(extra.get('by', ())))[0]


def final(run, metric='val_loss'):
  """The run's last logged `metric` once it is done, else None: a running,
  stopped or failed run's last value is not its final one, and a report on a
  sweep still under way must not count it."""
  values = [row[metric] for row in run['metrics'] if metric in row]
  return values[-1] if values and run.get('state') == 'done' else None


def _load_run(run_dir, entry):
  config = sweep.read_json(os.path.join(run_dir, 'config.json'))
  metrics_path = os.path.join(run_dir, files.METRICS)
  metrics = _metrics(metrics_path)
  status = runner.status(run_dir)
  # A done run that trained logged rows (an eval-only run has no metrics.jsonl).
  if status.get('state') == 'done' and os.path.exists(metrics_path) and not metrics:
    raise ConfigError(f'run {entry["name"]!r} is done but {metrics_path} holds no rows')
  wall = status.get('wall_s', 0.0)
  if status.get('state') == 'running' and 'started' in status:
    wall += max(time.time() - status['started'], 0.0)
  step = metrics[-1]['step'] if metrics else 0
  per_step = config['batch_size'] * config['seq_len'] if config else 0
  up = files.read_report(run_dir)
  return dict(
      name=entry['name'], state=status.get('state', 'not started'),
      overrides=entry['overrides'], parents=entry['parents'], config=config, metrics=metrics,
      step=step, total_steps=config['total_steps'] if config else None,
      tokens=step * per_step, tokens_per_step=per_step,
      start_step=0, wall_s=wall if status else None, upcycle=up,
      upcycle_jump=up['loss_after'] - up['loss_before'] if up else None)


def _metrics(path):
  """The rows of a run's metrics.jsonl. Only its last line may be torn (being
  written right now, or cut by a kill): it is skipped with a warning on
  stderr; a torn line before it, a row that is not an object with
  an integer step, or a non-finite loss is a one-line error naming the line."""
  if not os.path.exists(path):
    return []
  try:
    with open(path, encoding='utf-8') as f:
      lines = f.read().split('\n')
  except (OSError, UnicodeDecodeError) as e:
    raise ConfigError(f'{path}: cannot read ({e})') from None
  rows = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError:
      if number == len(lines):   # no newline yet: the line being written
        print(f'warning: {path} line {number} is torn (being written, or cut by a kill); '
              'skipped', file=sys.stderr)
        break
      raise ConfigError(f'{path} line {number} is not JSON (a torn write?)') from None
    if not isinstance(row, dict) or isinstance(row.get('step'), bool) or not isinstance(
        row.get('step'), int):
      raise ConfigError(f'{path} line {number}: expected an object with an integer step')
    bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v) and
           k.endswith('loss')]   # the trainer stops before it logs a non-finite loss
    if bad:
      raise ConfigError(f'{path} line {number}: {bad[0]}={row[bad[0]]} is not finite')
    rows.append(row)
  return rows


def _start(overrides):
  """(key, parent, step or None) of another run's checkpoint this run starts from."""
  for key in (hyper.UPCYCLE_SRC, hyper.RESUME_FROM, 'config.init_from'):
    match = sweep.REF.match(str(overrides.get(key, '')))
    if match:
      rest = overrides[key][match.end():].strip('/').split('/')
      step = int(rest[1]) if len(rest) == 2 and rest[1].isdigit() else None
      return key, match.group(1), step
  return None


def _columns(runs, by):
  keys = [k for k in sweep.varying([r['overrides'] for r in runs]) if k != 'name']
  if not by:
    return keys
  known = {k: k for r in runs for k in r['overrides']}
  known.update({v: k for k, v in sweep.labels(list(known)).items()})
  unknown = [b for b in by if b not in known]
  if unknown:
    raise ConfigError(f'--by={",".join(unknown)} is not a key of the sweep (keys: '
                      f'{", ".join(sorted(known))})')
  return [known[b] for b in by]


def _order(value):
  """Numbers by value, then strings, then runs without the key."""
  if isinstance(value, (int, float)):
    return (0, value, '')
  return (1, 0, str(value)) if value is not None else (2, 0, '')


def _cell(value, signed=False):
  if isinstance(value, float):
    return f'{value:+.3g}' if signed else f'{value:.4f}'
  return str(value)


def _tokens(own, total):
  fmt = lambda n: f'{n / 1e9:.2f}B' if n >= 1e9 else f'{n / 1e6:.2f}M' if n >= 1e6 else (
      f'{n / 1e3:.1f}k' if n >= 1e3 else str(n))
  return fmt(own) + (f' ({fmt(total)} with parent)' if total != own else '')


def _duration(seconds):
  if seconds is None:
    return ''
  seconds = int(round(seconds))
  return (f'{seconds // 3600}h{seconds // 60 % 60:02d}m' if seconds >= 3600 else
          f'{seconds // 60}m{seconds % 60:02d}s' if seconds >= 60 else f'{seconds}s')


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  if f.results:
    print(cli.run_reporting_errors(rebuild, f.results, f.out))
  elif f.workdir:
    print(cli.run_reporting_errors(write, os.path.abspath(f.workdir), f.metric, f.by))
  else:
    raise app.UsageError('give --workdir=DIR or --results=FILE')


if __name__ == '__main__':   # flags only here: a notebook imports this module as a library
  flags.DEFINE_string('workdir', None, 'The sweep directory.')
  flags.DEFINE_string('results', None, 'A results.json to rebuild the report from, alone.')
  flags.DEFINE_string('out', None, 'With --results: where report.md and plots/ go.')
  flags.DEFINE_string('metric', 'val_loss', 'The metric of the final and best columns.')
  flags.DEFINE_multi_string('by', [], 'Override key to show and sort by (repeat for more; '
                            'default: the keys that vary).')
  cli.run_app(main)
