"""Tokenise a corpus once into ArrayRecord shards that data.source=prepared streams.

  python -m moe_jax.data.prepare --src='DIR/*.jsonl' --out=DIR2 --tokenizer=bpe --workers=2
  python -m moe_jax.main --config=configs/lm_moe.py:tiny --workdir=/tmp/run \\
      --config.data.source=prepared --config.data.path=DIR2

Documents stream in (moe_jax/data/readers.py: text, JSONL, Parquet) and are
cut into units of about --shard_mb MB of text, in input order, whatever
--workers is. Worker processes tokenise a unit each (<bos> text <eos>, as the
in-memory pipeline does) and write its training and validation documents as
`train-NNNNN.array_record` / `validation-NNNNN.array_record`, one record per
document, beside `*.lengths.npy` (the documents' token counts, the row index
of prepared.py), each under a temporary name renamed when complete. A unit
counts once manifest.json lists it; the manifest is rewritten atomically after
each unit in order, and marked complete at the end.

Killed at any point, the same command skips the units the manifest lists
(re-reading, not re-tokenising, their input) and ends with the same shards as
an uninterrupted run; other sources, tokenizer or split settings are refused.
A document is held out for validation when the hash of (--split_seed, its
name) falls below --val_fraction (corpus.is_validation; names: readers.py),
so it keeps its side when others are added. --tokenizer=bpe trains a
byte-level BPE on the first --bpe_sample_mb MB of training text (at most
MAX_BPE_VOCAB ids); PATH is an existing tokenizer.json.

What the input holds that is no text is counted, never silently dropped: a
Parquet null in the text column is skipped, and a lone UTF-16 surrogate (valid
JSON, "\\ud800", but no character) is replaced by U+FFFD (readers.py); the
counts are in the manifest's `input` and the printed summary, with a warning
on stderr. Only files prepare itself names are removed from --out (a unit's
temporary shards, its own manifest's atomic-write leftovers); an empty input,
or one that leaves a split empty, leaves no --out behind. A full disk is a one-line error (exit 1); the same
command, once there is room, resumes. Worker processes die with the command
(a parent-death signal), killed or not.
"""
import concurrent.futures
import contextlib
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import sys
import threading
import time

from absl import flags
import numpy as np

from moe_jax import atomic, cli, containment
from moe_jax.data import corpus, prepared, readers, sources
from moe_jax.data.tokenizer import (SPECIALS_FILE, TOKENIZER_FILE, BpeTokenizer, ByteTokenizer,
                                    train_bpe)
from moe_jax.errors import ConfigError, RunError

_TMP = '.tmp'
MAX_BPE_VOCAB = 1 << 20
# The temporary files prepare writes into --out, and no others: a unit's shards
# before their rename, and atomic.write_bytes' leftovers of its own files.
_OWN_TMP = re.compile(r'(train|validation)-\d{5}\.(lengths\.npy|array_record)\.tmp|'
                      rf'\.({re.escape(prepared.MANIFEST)}|{re.escape(TOKENIZER_FILE)}|'
                      rf'{re.escape(SPECIALS_FILE)})\.[^/]+\.tmp')


def _units(docs, shard_bytes):
  """Lists of (name, text) of at least `shard_bytes` UTF-8 bytes (the last may be less)."""
  unit, size = [], 0
  for name, text in docs:
    unit.append((name, text))
    size += len(text.encode('utf-8'))
    if size >= shard_bytes:
      yield unit, size
      unit, size = [], 0
  if unit:
    yield unit, size


_WORKER_TOK = {}


def _tokenizer(spec):
  if spec not in _WORKER_TOK:
    _WORKER_TOK[spec] = ByteTokenizer() if spec == 'byte' else BpeTokenizer.load(spec)
  return _WORKER_TOK[spec]


def _write_unit(out, index, unit, tok_spec, dtype, val_fraction, split_seed):
  """Tokenises one unit and writes its shards; returns their counts."""
  from array_record.python.array_record_module import ArrayRecordWriter  # pylint: disable=g-import-not-at-top
  tok = _tokenizer(tok_spec)
  ids = sources.tokenize_texts([text for _, text in unit], tok)
  shards = {}
  for split in prepared.SPLITS:
    held_out = split == 'validation'
    chosen = [t for (name, _), t in zip(unit, ids)
              if corpus.is_validation(name, val_fraction, split_seed) == held_out]
    if not chosen:
      continue
    base = os.path.join(out, f'{split}-{index:05d}')
    lengths = np.asarray([len(t) for t in chosen], np.uint32)
    with open(base + '.lengths.npy' + _TMP, 'wb') as f:
      np.save(f, lengths)
    try:   # ArrayRecord reports a full disk as a RuntimeError
      writer = ArrayRecordWriter(base + '.array_record' + _TMP, 'group_size:1,zstd:1')
      for t in chosen:
        writer.write(t.astype(dtype).tobytes())
      writer.close()
    except RuntimeError as e:
      raise RunError(f'{base}.array_record: cannot write ({_first_line(e)}); run the same '
                     'command again once there is room') from None
    os.replace(base + '.lengths.npy' + _TMP, base + '.lengths.npy')
    os.replace(base + '.array_record' + _TMP, base + '.array_record')
    shards[split] = dict(file=os.path.basename(base) + '.array_record', docs=len(chosen),
                         tokens=int(lengths.sum()))
  return shards


def _first_line(error):
  return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _die_with_parent(parent):
  """A worker's initializer: it must not outlive the command (killed with -9,
  its queue's writer is gone and the worker would wait forever). Linux
  delivers SIGKILL when the parent dies (PR_SET_PDEATHSIG); elsewhere a
  thread polls the parent's pid."""
  if sys.platform.startswith('linux'):
    import ctypes  # pylint: disable=g-import-not-at-top
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # 1: PR_SET_PDEATHSIG
  else:
    def watch():
      while os.getppid() == parent:
        time.sleep(1)
      os._exit(1)  # pylint: disable=protected-access
    threading.Thread(target=watch, daemon=True).start()
  if os.getppid() != parent:   # it died before the signal was set
    os._exit(1)  # pylint: disable=protected-access


def worker_pool(workers):
  """The worker processes of `prepare --workers` (spawned, dying with this one)."""
  return concurrent.futures.ProcessPoolExecutor(
      workers, mp_context=multiprocessing.get_context('spawn'), initializer=_die_with_parent,
      initargs=(os.getpid(),))


def _check_numbers(workers, shard_mb, tokenizer, bpe_vocab_size, bpe_sample_mb):
  if workers < 1:
    raise ConfigError(f'--workers={workers} must be positive')
  if not (math.isfinite(shard_mb) and shard_mb > 0):
    raise ConfigError(f'--shard_mb={shard_mb} must be a finite number > 0')
  if tokenizer != 'bpe':
    return
  if not (math.isfinite(bpe_sample_mb) and bpe_sample_mb > 0):
    raise ConfigError(f'--bpe_sample_mb={bpe_sample_mb} must be a finite number > 0 (no text, '
                      'no merges)')
  if bpe_vocab_size > MAX_BPE_VOCAB:
    raise ConfigError(f'--bpe_vocab_size={bpe_vocab_size} exceeds {MAX_BPE_VOCAB} '
                      '(moe_jax.data.prepare.MAX_BPE_VOCAB)')


def _check_out(out, paths):
  if not out:
    raise ConfigError('--out is required')
  out = os.path.abspath(out)
  containment.not_run_file(out, '--out')
  for path in paths:
    real = os.path.realpath(path)
    if real == os.path.realpath(out) or real.startswith(os.path.realpath(out) + os.sep):
      raise ConfigError(f'--out={out} holds the source {path}; write the shards elsewhere')
  if os.path.exists(out) and not os.path.isdir(out):
    raise ConfigError(f'--out={out} is not a directory')
  if (os.path.isdir(out) and os.listdir(out)
      and not os.path.exists(os.path.join(out, prepared.MANIFEST))):
    raise ConfigError(f'--out={out} is not empty and holds no {prepared.MANIFEST}; '
                      'give a new or empty directory')
  return out


def _resume_check(out, args):
  """The interrupted (or finished) run's manifest when --out has one; refuses other args."""
  path = os.path.join(out, prepared.MANIFEST)
  if not os.path.exists(path):
    return None
  old = prepared.read_manifest(out, complete=False)
  for key, value in args.items():
    if old['args'].get(key) != value:
      what = 'source files' if key == 'files' else f'--{key}'
      raise ConfigError(f'{path}: {what} differs from the run that wrote it '
                        f'({old["args"].get(key)!r} vs {value!r}); use a new --out')
  return old


def _make_tokenizer(spec, out, old, paths, args):
  """(tokenizer, files to write into --out {name: text})."""
  if spec == 'byte':
    return ByteTokenizer(), {}
  if spec == 'bpe' and old:
    return BpeTokenizer.load(os.path.join(out, TOKENIZER_FILE)), {}
  if spec == 'bpe':
    budget = args['bpe_sample_mb'] * 1e6

    def sample():
      seen = 0
      for name, text in readers.documents(paths, args['format'], args['text_field']):
        if seen >= budget:
          return
        if not corpus.is_validation(name, args['val_fraction'], args['split_seed']):
          seen += len(text)
          yield text
    tok = train_bpe(sample(), args['bpe_vocab_size'])
    if tok.vocab_size <= ByteTokenizer().vocab_size:
      raise ConfigError(f'--tokenizer=bpe learned no merges from the first --bpe_sample_mb='
                        f'{args["bpe_sample_mb"]:g} MB of training text; give more text')
    return tok, {TOKENIZER_FILE: tok.to_json()}
  if not os.path.isfile(spec):
    raise ConfigError(f'--tokenizer={spec}: not byte, bpe or an existing tokenizer.json')
  tok = BpeTokenizer.load(spec)
  extra = {TOKENIZER_FILE: tok.to_json()}
  if tok.specials:
    extra[SPECIALS_FILE] = json.dumps(tok.specials, indent=2)
  return tok, extra


def prepare(src, out, tokenizer='byte', fmt='', text_field='text', workers=1, val_fraction=0.05,
            split_seed=0, shard_mb=16, bpe_vocab_size=4096, bpe_sample_mb=64, progress=False):
  """Writes (or completes) the prepared corpus at `out`; returns its manifest."""
  paths = readers.files(src or '')
  out = _check_out(out, paths)
  formats = sorted({readers.format_of(p, fmt) for p in paths})
  for path in paths:
    readers.check(path, fmt, text_field)
  if not 0 < val_fraction < 1:
    raise ConfigError(f'--val_fraction={val_fraction} must be in (0, 1)')
  _check_numbers(workers, shard_mb, tokenizer, bpe_vocab_size, bpe_sample_mb)
  args = dict(src=src, format=fmt, text_field=text_field, val_fraction=val_fraction,
              split_seed=split_seed, shard_mb=shard_mb, tokenizer=tokenizer,
              bpe_vocab_size=bpe_vocab_size if tokenizer == 'bpe' else None,
              bpe_sample_mb=bpe_sample_mb if tokenizer == 'bpe' else None,
              files=[[p, os.path.getsize(p)] for p in paths])
  old = _resume_check(out, args)
  tok, tok_files = _make_tokenizer(tokenizer, out, old, paths, args)
  if old and old['tokenizer']['fingerprint'] != tok.fingerprint:
    raise ConfigError(f'{os.path.join(out, prepared.MANIFEST)}: --tokenizer={tokenizer} is '
                      'another tokenizer than the one its shards hold; use a new --out')
  if old and old.get('complete'):
    return old
  dtype = 'uint16' if tok.vocab_size <= 1 << 16 else 'uint32'
  manifest = old or dict(
      format_version=prepared.FORMAT_VERSION, complete=False, args=args, formats=formats,
      dtype=dtype, tokenizer=dict(name=tokenizer, fingerprint=tok.fingerprint,
                                  vocab_size=tok.vocab_size,
                                  file=TOKENIZER_FILE if tok.fingerprint != 'byte' else None),
      units=[])

  # Every check has passed: the first write.
  created = not os.path.exists(out)
  os.makedirs(out, exist_ok=True)
  for name, text in tok_files.items():
    atomic.write_text(os.path.join(out, name), text)
  _write_manifest(out, manifest)
  tok_spec = 'byte' if tok.fingerprint == 'byte' else os.path.join(out, TOKENIZER_FILE)
  notes = readers.Notes()
  try:
    _run(out, manifest, paths, args, tok_spec, workers, progress, notes)
    manifest.update(_totals(out, manifest, tok), input=notes.counts(), complete=True)
  except ConfigError as e:
    # Bad input before any unit, or a split left empty: nothing to resume, no trace.
    if not old and (not manifest['units'] or isinstance(e, _EmptySplit)):
      _remove_own(out, created, tok_files, manifest)
    raise
  finally:
    for name in os.listdir(out) if os.path.isdir(out) else ():
      if _OWN_TMP.fullmatch(name):
        os.remove(os.path.join(out, name))
  _write_manifest(out, manifest)
  for line in notes.lines():
    print(f'warning: {line}', file=sys.stderr)
  return manifest


class _EmptySplit(ConfigError):
  """A split without a document once the whole input is written."""


def _remove_own(out, created, tok_files, manifest):
  """Undoes the first write: --out itself where prepare made it, else its
  files (the manifest, the tokenizer and each unit's shards)."""
  if created:
    shutil.rmtree(out)
    return
  shards = [s['file'] for u in manifest['units'] for s in u['shards'].values()]
  shards += [f.removesuffix('.array_record') + '.lengths.npy' for f in shards]
  for name in [prepared.MANIFEST, *tok_files, *shards]:
    if os.path.exists(os.path.join(out, name)):
      os.remove(os.path.join(out, name))


def _write_manifest(out, manifest):
  atomic.write_text(os.path.join(out, prepared.MANIFEST), json.dumps(manifest, indent=1) + '\n')


def _run(out, manifest, paths, args, tok_spec, workers, progress, notes):
  done = manifest['units']
  docs = readers.documents(paths, args['format'], args['text_field'], notes)
  units = _units(docs, args['shard_mb'] * 1e6)
  bar = _bar(progress)
  task = lambda i, unit: (_write_unit, out, i, unit, tok_spec, manifest['dtype'],
                          args['val_fraction'], args['split_seed'])
  with contextlib.ExitStack() as stack:
    stack.enter_context(_worker_deaths())
    pool = None
    if workers > 1:
      pool = stack.enter_context(worker_pool(workers))
      stack.callback(pool.shutdown, cancel_futures=True)
    pending = []   # (unit index, its size, docs, future) in input order, at most 2 * workers

    def finish(index, size, count, shards):
      done.append(dict(docs=count, bytes=size, shards=shards))
      _write_manifest(out, manifest)
      if bar is not None:
        bar.update(size)
        bar.set_postfix(docs=sum(u['docs'] for u in done), tokens=sum(
            s['tokens'] for u in done for s in u['shards'].values()), refresh=False)

    for index, (unit, size) in enumerate(units):
      if index < len(done):   # written before an interruption: check it is the same input
        if (done[index]['docs'], done[index]['bytes']) != (len(unit), size):
          raise ConfigError(f'{os.path.join(out, prepared.MANIFEST)}: unit {index} of the '
                            'input differs from the interrupted run\'s; use a new --out')
        continue
      fn, *fn_args = task(index, unit)
      if pool is None:
        finish(index, size, len(unit), fn(*fn_args))
        continue
      pending.append((index, size, len(unit), pool.submit(fn, *fn_args)))
      while len(pending) >= 2 * workers or (pending and pending[0][3].done()):
        i, s, c, future = pending.pop(0)
        finish(i, s, c, future.result())
    for i, s, c, future in pending:
      finish(i, s, c, future.result())
  if bar is not None:
    bar.close()


@contextlib.contextmanager
def _worker_deaths():
  """A worker killed (the OOM killer, kill -9) is a one-line RunError: the
  units written so far stay in the manifest, and the same command resumes."""
  try:
    yield
  except concurrent.futures.BrokenExecutor:   # BrokenProcessPool
    raise RunError('a worker process died while writing a unit (killed? out of memory?); '
                   'run the same command again to resume, with fewer --workers if memory '
                   'ran out') from None


def _bar(progress):
  if not progress:
    return None
  import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm.tqdm(unit='B', unit_scale=True, desc='prepare', mininterval=1, smoothing=0.1)


def _totals(out, manifest, tok):
  """Per-split shard lists and counts, and the validation targets' unigram entropy
  (one pass over the validation shards)."""
  splits = {}
  for split in prepared.SPLITS:
    shards = [u['shards'][split] for u in manifest['units'] if split in u['shards']]
    if not shards:
      raise _EmptySplit(f'--src: the {split} split is empty ({sum(u["docs"] for u in manifest["units"])}'
                        ' documents in all); give more documents or another --val_fraction')
    splits[split] = dict(docs=sum(s['docs'] for s in shards),
                         tokens=sum(s['tokens'] for s in shards), shards=shards)
  counts = np.zeros(tok.vocab_size, np.int64)
  import grain  # pylint: disable=g-import-not-at-top
  for shard in splits['validation']['shards']:
    source = grain.sources.ArrayRecordDataSource([os.path.join(out, shard['file'])])
    for i in range(len(source)):
      counts += np.bincount(np.frombuffer(source[i], manifest['dtype'])[1:],
                            minlength=tok.vocab_size)
  return dict(splits=splits, validation_unigram_entropy=sources.counts_entropy(counts))


def define_flags():
  """The command line; defined only when run as a program, so importing this
  module beside another entry point defines no clashing flags."""
  flags.DEFINE_string('src', None, 'Comma-separated glob patterns of the input files.')
  flags.DEFINE_string('out', None, 'The directory of shards and manifest.json.')
  flags.DEFINE_string('tokenizer', 'byte', 'byte | bpe | PATH of a tokenizer.json.')
  flags.DEFINE_string('format', '', 'text | jsonl | parquet; empty: by file suffix.')
  flags.DEFINE_string('text_field', 'text', 'JSONL field / Parquet column.')
  flags.DEFINE_integer('workers', 1, 'Tokenising processes.')
  flags.DEFINE_float('val_fraction', 0.05, 'Share of documents held out.')
  flags.DEFINE_integer('split_seed', 0, 'Picks the validation documents.')
  flags.DEFINE_float('shard_mb', 16, 'MB of input text per unit of shards.')
  flags.DEFINE_integer('bpe_vocab_size', 4096, '--tokenizer=bpe: vocabulary size.')
  flags.DEFINE_float('bpe_sample_mb', 64, '--tokenizer=bpe: MB of text to train on.')
  flags.DEFINE_bool('progress', True, 'Show a progress bar on stderr.')


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  manifest = cli.run_reporting_errors(
      prepare, f.src, f.out, f.tokenizer, f.format, f.text_field, f.workers, f.val_fraction,
      f.split_seed, f.shard_mb, f.bpe_vocab_size, f.bpe_sample_mb, f.progress)
  print(json.dumps(dict(out=os.path.abspath(f.out), tokenizer=manifest['tokenizer']['name'],
                        input=manifest.get('input', {}),
                        **{s: {k: v for k, v in manifest['splits'][s].items() if k != 'shards'}
                           for s in prepared.SPLITS})))


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
