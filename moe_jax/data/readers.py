"""Streaming document readers for `moe_jax.data.prepare`: plain text, JSON Lines, Parquet.

Each yields (name, text) one document at a time, in a fixed order, and never
holds more than one document (a Parquet record batch) in memory. The name is
the document's identity for the validation split: the file path for a text
file (one file, one document, as data.source=text_files reads it), FILE:LINE
for a JSONL line and FILE:ROW for a Parquet row.

Valid input that holds no text is counted in a `Notes`, never dropped
unsaid: a Parquet null in the text column is skipped (`null_texts`); a lone
UTF-16 surrogate, which JSON may escape ("\\ud800") but no UTF-8 text can
hold, is replaced by U+FFFD (`lone_surrogates`, per character).
"""
import codecs
import collections
import glob
import json
import os
import re
import sys

from moe_jax.errors import ConfigError

FORMATS = ('text', 'jsonl', 'parquet')
_LONE_SURROGATE = re.compile('[\ud800-\udfff]')   # json.loads pairs the valid ones


class Notes:
  """Counts of what the readers skipped or replaced, with the first place each
  happened, for the summary of a run."""

  _SAID = dict(null_texts='Parquet null(s) in the text column skipped',
               lone_surrogates='lone surrogate(s) replaced by U+FFFD')

  def __init__(self):
    self._counts, self._first = collections.Counter(), {}

  def add(self, kind, where, n=1):
    self._counts[kind] += n
    self._first.setdefault(kind, where)

  def counts(self):
    return {kind: self._counts.get(kind, 0) for kind in self._SAID}

  def lines(self):
    return [f'{self._counts[k]} {said} (the first at {self._first[k]})'
            for k, said in self._SAID.items() if self._counts.get(k)]
_BY_SUFFIX = {'.jsonl': 'jsonl', '.json': 'jsonl', '.parquet': 'parquet'}


def files(patterns, flag='--src', empty_hint='give comma-separated glob patterns'):
  """The files matched by comma-separated glob `patterns`, each once, in order;
  errors name `flag`, the setting the patterns came from."""
  patterns = [p.strip() for p in patterns.split(',') if p.strip()]
  if not patterns:
    raise ConfigError(f'{flag} is empty; {empty_hint}')
  out, seen = [], set()
  for pattern in patterns:
    paths = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True)
                   if os.path.isfile(p))
    if not paths:
      raise ConfigError(f'{flag}: {pattern!r} matches no files')
    out += [p for p in paths if p not in seen]
    seen.update(paths)
  return out


def format_of(path, fmt):
  """`fmt`, or the one the file's suffix says ('' = detect; text otherwise)."""
  if fmt and fmt not in FORMATS:
    raise ConfigError(f'--format={fmt!r} is not one of {", ".join(FORMATS)}')
  return fmt or _BY_SUFFIX.get(os.path.splitext(path)[1].lower(), 'text')


def check(path, fmt='', text_field='text'):
  """Refuses a file that does not start as its format says (its first document
  or footer only: no pass over the corpus), so bad input is found before
  anything is written."""
  kind = format_of(path, fmt)
  if kind == 'parquet':
    next(_parquet(path, text_field, rows=False), None)
    return
  with open(path, 'rb') as f:
    head = f.read(1 << 16)
  if kind == 'text':
    _check_text(path, head, final=len(head) < 1 << 16)
  else:   # up to the first document; a line cut by the 64 KB read is not judged
    lines = head.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b'\n') and len(head) == 1 << 16:
      lines.pop()
    next(_jsonl_lines(path, lines, text_field), None)


def _check_text(path, raw, final=True):
  if b'\0' in raw[:1 << 16]:
    raise ConfigError(f'{path}: not a text file (it holds NUL bytes); --format is text, '
                      'jsonl or parquet')
  try:
    return codecs.getincrementaldecoder('utf-8')().decode(raw, final=final)
  except UnicodeDecodeError as e:
    raise ConfigError(f'{path}: not UTF-8 text ({e.reason} at byte {e.start})') from None


def documents(paths, fmt='', text_field='text', notes=None):
  """(name, text) of every document of `paths`; what was skipped or replaced
  is counted in `notes` (a Notes) when given."""
  notes = notes or Notes()
  for path in paths:
    kind = format_of(path, fmt)
    yield from {'text': _text, 'jsonl': _jsonl, 'parquet': _parquet}[kind](
        path, text_field, notes=notes)


def _text(path, _, notes=None):
  del notes
  with open(path, 'rb') as f:
    text = _check_text(path, f.read())
  if text:
    yield path, text


def _jsonl(path, text_field, notes=None):
  with open(path, 'rb') as f:
    yield from _jsonl_lines(path, f, text_field, notes)


def json_lines(path, lines):
  """('PATH:LINE', record) of each non-blank line of `lines` (bytes or str);
  a line that is not JSON is a one-line ConfigError naming it."""
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    where = f'{path}:{number}'
    try:
      yield where, json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
      raise ConfigError(f'{where}: not a JSON line ({str(e).splitlines()[0]}); is the file '
                        'JSONL?') from None
    except RecursionError:   # json's parser recurses once per level of [ or {
      raise ConfigError(f'{where}: a JSON line nested deeper than the reader can follow '
                        f'(Python\'s recursion limit, {sys.getrecursionlimit()})') from None


def _jsonl_lines(path, lines, text_field, notes=None):
  for where, record in json_lines(path, lines):
    text = record.get(text_field) if isinstance(record, dict) else None
    if not isinstance(text, str):
      raise ConfigError(f'{where}: no string field {text_field!r} (--text_field)')
    text, lone = _LONE_SURROGATE.subn('\ufffd', text)
    if lone and notes is not None:
      notes.add('lone_surrogates', where, lone)
    if text:
      yield where, text


def _parquet(path, text_field, rows=True, notes=None):
  import pyarrow  # pylint: disable=g-import-not-at-top (only Parquet needs it)
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  try:
    table = pq.ParquetFile(path)
  except (pyarrow.ArrowException, OSError) as e:
    raise ConfigError(f'{path}: not a Parquet file ({str(e).splitlines()[0]})') from None
  if text_field not in table.schema_arrow.names:
    raise ConfigError(f'{path}: no column {text_field!r} (--text_field); it has '
                      f'{", ".join(table.schema_arrow.names)}')
  row = 0
  for batch in table.iter_batches(batch_size=1024, columns=[text_field]):
    for text in batch.column(0).to_pylist():
      row += 1
      if text is None:
        if notes is not None:
          notes.add('null_texts', f'{path}:{row}')
        continue
      if not isinstance(text, str):
        raise ConfigError(f'{path}:{row}: column {text_field!r} holds '
                          f'{type(text).__name__}, not text')
      if text:
        yield f'{path}:{row}', text
