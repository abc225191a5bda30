"""The runs table: one row per finished training run, as CSV or JSON lines.

Columns (seed 002 notation, sec. 3.1 and eqs. 4-6):
  kind      dense | moe | upcycled
  N1        non-embedding parameters of the dense model (for a MoE: of its
            dense counterpart, as seed 002 Table 2 fits MoE with N1)
  N2        active non-embedding parameters;  N_total  all non-embedding ones
  D1        tokens of the first phase (dense or from-scratch runs: all tokens)
  D2        tokens after upcycling (0 for dense and moe runs)
  P         sparsity N_total / N2;  n_expert, top_k  the MoE shape
  source_experts  an upcycled run's experts before it grew (0: from dense)
  loss      final validation cross-entropy in nats
A form reads only its own columns, so a table of dense runs may leave the MoE
columns empty; those it reads must be present, finite and positive.
"""
import csv
import io
import json
import os

import numpy as np

from moe_jax import atomic
from moe_jax.errors import ConfigError

COLUMNS = ('kind', 'N1', 'N2', 'N_total', 'D1', 'D2', 'P', 'n_expert', 'top_k', 'loss')
KINDS = ('dense', 'moe', 'upcycled')
MAX_LOSS = 100.0   # nats; a uniform guess over 1M tokens is 13.8


def _number(value):
  if value is None or value == '':
    return np.nan
  return float(value)


def from_rows(rows, source='runs table'):
  """Column dict from a list of row dicts; unknown columns are kept as given."""
  if not rows:
    raise ConfigError(f'{source}: no rows')
  names = list(dict.fromkeys(k for row in rows for k in row))
  cols = {}
  for name in names:
    values = [row.get(name) for row in rows]
    if name == 'kind':
      cols[name] = np.array([str(v) for v in values])
      bad = sorted(set(cols[name]) - set(KINDS))
      if bad:
        raise ConfigError(f'{source}: kind {str(bad[0])!r} is not one of {list(KINDS)}')
      continue
    try:
      cols[name] = np.array([_number(v) for v in values], dtype=float)
    except (TypeError, ValueError):
      cols[name] = np.array(values, dtype=object)
  return cols


def load(path):
  """Reads a .csv (header row) or .jsonl / .json (one object per line) table,
  UTF-8; a row that does not fit (a ragged CSV row, a line that is not a
  JSON object) is an error naming its line."""
  if not os.path.isfile(path):
    raise ConfigError(f'runs table {path}: no such file')
  try:
    with open(path, encoding='utf-8', newline='') as f:
      text = f.read()
  except UnicodeDecodeError as e:
    raise ConfigError(f'runs table {path}: not UTF-8 ({e.reason} at byte {e.start})') from None
  except OSError as e:
    raise ConfigError(f'runs table {path}: cannot read ({e.strerror})') from None
  source = f'runs table {path}'
  return from_rows(_csv_rows(text, source) if path.endswith('.csv') else _jsonl_rows(text, source),
                   source=source)


def _csv_rows(text, source):
  reader = csv.reader(io.StringIO(text))
  try:
    header = next(reader, None) or []
    twice = sorted({h for h in header if header.count(h) > 1})
    if twice:
      raise ConfigError(f'{source}: column {twice[0]!r} appears more than once in the header')
    rows = []
    for values in reader:
      if not values:
        continue
      if len(values) != len(header):
        raise ConfigError(f'{source}: line {reader.line_num} has {len(values)} fields, the '
                          f'header {len(header)}')
      rows.append(dict(zip(header, values)))
  except csv.Error as e:
    raise ConfigError(f'{source}: line {reader.line_num}: {e}') from None
  return rows


def _jsonl_rows(text, source):
  rows = []
  for number, line in enumerate(text.splitlines(), 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError as e:
      raise ConfigError(f'{source}: line {number} is not JSON ({e.msg})') from None
    if not isinstance(row, dict):
      raise ConfigError(f'{source}: line {number} is a JSON {type(row).__name__}, not an object')
    rows.append(row)
  return rows


def write(cols, path=None):
  """Writes JSON lines (to `path`, atomically, or returns the text)."""
  n = len(next(iter(cols.values())))
  lines = []
  for i in range(n):
    row = {k: (v[i].item() if hasattr(v[i], 'item') else v[i]) for k, v in cols.items()}
    lines.append(json.dumps(row))
  text = '\n'.join(lines) + '\n'
  if path is not None:
    atomic.write_text(path, text)
  return text


def select(cols, kind):
  """The rows of one kind (or all rows for kind None / 'all')."""
  if kind in (None, 'all'):
    return cols
  if 'kind' not in cols:
    raise ConfigError(f'runs table: missing column kind (needed to select {kind!r})')
  keep = cols['kind'] == kind
  if not keep.any():
    raise ConfigError(f'runs table: no rows of kind {kind!r}')
  return {k: v[keep] for k, v in cols.items()}


def check(cols, columns, what):
  """Raises ConfigError unless `columns` (and loss) exist and are finite and > 0."""
  for name in tuple(columns) + ('loss',):
    if name not in cols:
      raise ConfigError(f'runs table: missing column {name!r} needed by {what}')
    if name == 'kind':
      continue
    v = cols[name]
    if v.dtype == object:
      raise ConfigError(f'runs table: column {name!r} is not numeric')
    bad = np.flatnonzero(~(np.isfinite(v) & (v > 0)))
    if bad.size:
      raise ConfigError(f'runs table: column {name!r} must be finite and > 0 for {what}; '
                        f'row {bad[0]} has {v[bad[0]]}')
  over = np.flatnonzero(cols['loss'] > MAX_LOSS)
  if over.size:
    raise ConfigError(f'runs table: loss {cols["loss"][over[0]]:g} (row {over[0]}) is no '
                      f'cross-entropy in nats (at most {MAX_LOSS:g}: ln of a 2.7e43-token '
                      'vocabulary)')
