"""Runs table rows from moe_jax workdirs (a sweep's output, for example).

A row is read from two files each run writes, never from the model code, so
workdirs written by older or other code work as long as they hold the fields:
  run.json       the trainer's record at start (moe_jax/workdir/run_record.py):
                 tokens_per_step, total_steps, upcycle_step, and parameter
                 counts of the model, the grown model and the source
  metrics.jsonl  one JSON object per logged step; eval steps carry `val_loss`
A row takes:
  loss      the last val_loss, which must be logged at total_steps
  N1        non-embedding parameters of the dense counterpart (experts removed)
            of the model, or of the source model for an upcycled run
  N2, N_total, P, n_expert, top_k   for the model at the end of the run
            (after an in-run upcycle, the grown one)
  kind, D1, D2:
    from scratch        dense | moe;  D1 = total_steps * tokens_per_step, D2 = 0
    upcycle_step = tau  upcycled;     D1 = tau * tokens_per_step, D2 = the rest
    a source checkpoint upcycled;     D1 = the source's tokens at its step,
    (init_from, or the  D2 = this run's tokens
    upcycle CLI's --src)
"""
import json
import os

from moe_jax.errors import ConfigError


def _read_json(path):
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
  except (OSError, UnicodeDecodeError) as e:
    raise ConfigError(f'{path}: cannot read ({e})') from None
  except json.JSONDecodeError as e:
    raise ConfigError(f'{path}: not JSON ({e.msg})') from None
  if not isinstance(record, dict):
    raise ConfigError(f'{path}: expected a JSON object, got {type(record).__name__}')
  return record


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
  return _read_json(path)


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


def row(workdir):
  """One runs-table row (a dict with table.COLUMNS) for a workdir."""
  run, where = read_run(workdir), f'{workdir}/run.json'
  get = lambda key: _field(run, key, where)
  total, tokens_per_step = get('total_steps'), get('tokens_per_step')
  step, loss = last_val_loss(workdir)
  if step != total:
    raise ConfigError(f'{workdir}: last val_loss is at step {step}, not total_steps='
                      f'{total} (unfinished run?)')
  tau, source = run.get('upcycle_step') or 0, run.get('source')
  final = get('grown') if tau else get('model')
  n1 = get('model.dense_nonembed')
  if tau and source:
    raise ConfigError(f'{workdir}: both a source checkpoint and upcycle_step are set; D1 is '
                      'ambiguous')
  if tau:
    kind, d1, d2 = 'upcycled', float(tau * tokens_per_step), float((total - tau) * tokens_per_step)
  elif source:
    kind, d1, d2 = 'upcycled', float(get('source.tokens')), float(total * tokens_per_step)
    n1 = get('source.model.dense_nonembed')
  else:
    kind = 'moe' if get('model.num_experts') else 'dense'
    d1, d2 = float(total * tokens_per_step), 0.0
  fget = lambda key: _field(final, key, f'{where} ({"grown" if tau else "model"})')
  n2, n_total = fget('nonembed_active'), fget('nonembed')
  return {'kind': kind, 'N1': n1, 'N2': n2, 'N_total': n_total, 'D1': d1, 'D2': d2,
          'P': n_total / n2, 'n_expert': fget('num_experts'), 'top_k': fget('top_k'),
          'loss': loss, 'workdir': workdir}


def collect(workdirs):
  if not workdirs:
    raise ConfigError('collect: no workdirs given')
  return [row(w) for w in workdirs]
