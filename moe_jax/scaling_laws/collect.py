"""Runs table rows from moe_jax workdirs (a sweep's output, for example).

A row is read from the files each run writes, never from the model code, so
workdirs written by older or other code work as long as they hold the fields:
  run.json       the trainer's record at start (moe_jax/workdir/run_record.py):
                 tokens_per_step, total_steps, upcycle_step, and parameter
                 counts of the model, the grown model and the source
  lineage.json   the stages the model went through, root first, each with its
                 model summary and the tokens seen before it
                 (moe_jax/workdir/lineage.py)
  metrics.jsonl  one JSON object per logged step; eval steps carry `val_loss`
A row takes:
  loss      the last val_loss, which must be logged at total_steps
  N2, N_total, P, n_expert, top_k   for the model at the end of the run
  kind, N1, D1, D2 from the history: with a growth (a stage whose model differs
            from the one before: an in-run transition, the upcycle CLI, in this
            workdir or an ancestor) the run is `upcycled`, D1 = all tokens seen
            before the last growth (the whole parent chain), D2 = all after it,
            N1 = the grown model's dense counterpart (experts removed),
            source_experts = its experts (0: sparse upcycling); without
            one it is `dense` | `moe`, D1 = all tokens, D2 = 0. A stage that
            only continues training (init_from of the same model) adds tokens.
A workdir whose config.json is there but is no run config (json_file.read_config)
gives no row: its files may not be the run's either.
A workdir written before lineage.json existed is read from run.json alone:
  from scratch        D1 = total_steps * tokens_per_step, D2 = 0
  upcycle_step = tau  D1 = tau * tokens_per_step, D2 = the rest
  a source checkpoint D1 = the source's own tokens at its step, D2 = this run's
"""
import json
import math
import os

from moe_jax.errors import ConfigError
from moe_jax.json_file import read_config, read_json


def _field(record, dotted, where):
  """record['a']['b'] for 'a.b'; a missing field is a one-line error naming it."""
  value = record
  for part in dotted.split('.'):
    if not isinstance(value, dict) or value.get(part) is None:
      raise ConfigError(f'{where}: missing field {dotted!r}')
    value = value[part]
  return value


def read_run(workdir):
  """The workdir's run.json (see the module docstring)."""
  path = os.path.join(workdir, 'run.json')
  if not os.path.isfile(path):
    raise ConfigError(f'workdir {workdir}: no run.json (written by the trainer at start)')
  return read_json(path)


def last_val_loss(workdir):
  """(step, val_loss) of the last metrics.jsonl record that has val_loss."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.isfile(path):
    raise ConfigError(f'workdir {workdir}: no metrics.jsonl')
  last = None
  try:
    with open(path, encoding='utf-8') as f:
      lines = f.read().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    raise ConfigError(f'{path}: cannot read ({e})') from None
  for i, line in enumerate(lines):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError:
      raise ConfigError(f'{path}: line {i + 1} is not JSON') from None
    if not isinstance(record, dict):
      raise ConfigError(f'{path}: line {i + 1} is not a JSON object')
    if 'val_loss' in record:
      try:
        last = (int(record['step']), float(record['val_loss']))
      except (KeyError, TypeError, ValueError):
        raise ConfigError(f'{path}: line {i + 1}: step and val_loss must be numbers') from None
  if last is None:
    raise ConfigError(f'{path}: no record has val_loss')
  return last


def read_stages(workdir):
  """The stages of the workdir's lineage.json, or None when it has none."""
  path = os.path.join(workdir, 'lineage.json')
  if not os.path.isfile(path):
    return None
  stages = _field(read_json(path), 'stages', path)
  if not isinstance(stages, list) or not stages:
    raise ConfigError(f'{path}: "stages" is not a non-empty list')
  return stages


def tokens_at(stages, step, where):
  """Tokens the chain has seen at `step` of its last stage's workdir."""
  last = stages[-1]
  get = lambda key: _field(last, key, f'{where} (last stage)')
  return get('tokens_before') + (step - get('start_step')) * get('tokens_per_step')


def _grown(a, b):
  return any(a.get(k) != b.get(k) for k in ('params', 'num_experts', 'top_k'))


def _from_history(stages, total, where):
  """(kind, N1, D1, D2, source experts, final model) of a run with lineage.json."""
  tokens = tokens_at(stages, total, where)
  model = lambda i: _field(stages[i], 'model', f'{where} (stage {i})')
  growths = [i for i in range(1, len(stages)) if _grown(model(i - 1), model(i))]
  final = model(len(stages) - 1)
  if not growths:
    kind = 'moe' if _field(final, 'num_experts', where) else 'dense'
    return kind, _field(final, 'dense_nonembed', where), float(tokens), 0.0, None, final
  g = growths[-1]
  d1 = _field(stages[g], 'tokens_before', f'{where} (stage {g})')
  grown = model(g - 1)
  return ('upcycled', _field(grown, 'dense_nonembed', f'{where} (stage {g - 1})'), float(d1),
          float(tokens - d1), grown.get('num_experts'), final)


def row(workdir):
  """One runs-table row (a dict with table.COLUMNS) for a workdir."""
  run, where = read_run(workdir), f'{workdir}/run.json'
  if os.path.lexists(os.path.join(workdir, 'config.json')):
    read_config(os.path.join(workdir, 'config.json'))
  get = lambda key: _field(run, key, where)
  total, tokens_per_step = get('total_steps'), get('tokens_per_step')
  step, loss = last_val_loss(workdir)
  if step != total:
    raise ConfigError(f'{workdir}: last val_loss is at step {step}, not total_steps='
                      f'{total} (unfinished run?)')
  stages = read_stages(workdir)
  if stages is not None:
    kind, n1, d1, d2, src_e, final = _from_history(stages, total, f'{workdir}/lineage.json')
    return _row(kind, n1, d1, d2, src_e, final, loss, workdir, f'{workdir}/lineage.json')
  tau, source = run.get('upcycle_step') or 0, run.get('source')
  final = get('grown') if tau else get('model')
  n1, src_e = get('model.dense_nonembed'), None
  if tau and source:
    raise ConfigError(f'{workdir}: both a source checkpoint and upcycle_step are set; D1 is '
                      'ambiguous')
  if tau:
    kind, d1, d2 = 'upcycled', float(tau * tokens_per_step), float((total - tau) * tokens_per_step)
    src_e = get('model.num_experts')
  elif source:
    kind, d1, d2 = 'upcycled', float(get('source.tokens')), float(total * tokens_per_step)
    n1, src_e = get('source.model.dense_nonembed'), get('source.model.num_experts')
  else:
    kind = 'moe' if get('model.num_experts') else 'dense'
    d1, d2 = float(total * tokens_per_step), 0.0
  return _row(kind, n1, d1, d2, src_e, final, loss, workdir,
              f'{where} ({"grown" if tau else "model"})')


def _row(kind, n1, d1, d2, source_experts, final, loss, workdir, where):
  fget = lambda key: _field(final, key, where)
  n2, n_total = fget('nonembed_active'), fget('nonembed')
  out = {'kind': kind, 'N1': n1, 'N2': n2, 'N_total': n_total, 'D1': d1, 'D2': d2,
          'P': n_total / n2, 'n_expert': fget('num_experts'), 'top_k': fget('top_k'),
          'source_experts': source_experts, 'loss': loss, 'workdir': workdir}
  for key, value in out.items():   # JSON has no NaN: a row prints as JSON or not at all
    if isinstance(value, (int, float)) and not (math.isfinite(value) and value >= 0):
      raise ConfigError(f'{where}: {key}={value} must be a finite number >= 0')
  return out


def collect(workdirs):
  if not workdirs:
    raise ConfigError('collect: no workdirs given')
  return [row(w) for w in workdirs]
