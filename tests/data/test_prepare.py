"""moe_jax.data.prepare: formats, the split, resume after kill -9, bad input."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow
import pyarrow.parquet as pq
import pytest

from moe_jax.data import corpus, prepare, prepared, sources
from moe_jax.data.tokenizer import train_bpe
from moe_jax.errors import ConfigError

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = ('thee', 'thou', 'hath', 'doth', 'O', 'love', 'night', 'día', '夜')


def texts(n, seed=0):
  rng = np.random.default_rng(seed)
  return [f'{i}: ' + ' '.join(rng.choice(WORDS, size=int(rng.integers(3, 60)))) for i in range(n)]


def write_jsonl(path, docs, field='text'):
  with open(path, 'w', encoding='utf-8') as f:
    for text in docs:
      f.write(json.dumps({field: text, 'other': 1}, ensure_ascii=False) + '\n')


def shard_records(out, manifest, split):
  """Every document of `split`, decoded, in shard order."""
  import grain  # pylint: disable=g-import-not-at-top
  tok = prepared.load_tokenizer(out, manifest)
  docs = []
  for shard in manifest['splits'][split]['shards']:
    source = grain.sources.ArrayRecordDataSource([os.path.join(out, shard['file'])])
    docs += [np.frombuffer(source[i], manifest['dtype']) for i in range(len(source))]
  return docs, tok


def _shards(out):
  return {os.path.basename(p): open(p, 'rb').read()
          for p in sorted(glob.glob(os.path.join(out, '*')))
          if not p.endswith(prepared.MANIFEST)}


@pytest.mark.parametrize('fmt', ['jsonl', 'parquet', 'text'])
def test_every_document_lands_once_on_its_side_of_the_split(tmp_path, fmt):
  docs = texts(40)
  src = tmp_path / 'src'
  src.mkdir()
  if fmt == 'jsonl':
    write_jsonl(src / 'a.jsonl', docs[:25])
    write_jsonl(src / 'b.jsonl', docs[25:])
    names = [f'{src}/a.jsonl:{i + 1}' for i in range(25)] + [
        f'{src}/b.jsonl:{i + 1}' for i in range(15)]
  elif fmt == 'parquet':
    pq.write_table(pyarrow.table({'text': docs}), src / 'a.parquet', row_group_size=7)
    names = [f'{src}/a.parquet:{i + 1}' for i in range(40)]
  else:
    for i, text in enumerate(docs):
      (src / f'{i:02d}.txt').write_text(text, encoding='utf-8')
    names = [f'{src}/{i:02d}.txt' for i in range(40)]
  out = str(tmp_path / 'out')
  manifest = prepare.prepare(f'{src}/*', out, val_fraction=0.25, shard_mb=0.0004)
  assert manifest['complete'] and len(manifest['units']) > 3
  for split in prepared.SPLITS:
    got, tok = shard_records(out, manifest, split)
    want = [t for n, t in zip(names, docs)
            if corpus.is_validation(n, 0.25, 0) == (split == 'validation')]
    assert [tok.decode(ids) for ids in got] == want
    assert all(ids[0] == tok.bos_id and ids[-1] == tok.eos_id for ids in got)
    assert manifest['splits'][split]['docs'] == len(want) > 0
    assert manifest['splits'][split]['tokens'] == sum(map(len, got))
  val, _ = shard_records(out, manifest, 'validation')
  assert manifest['validation_unigram_entropy'] == pytest.approx(
      sources.unigram_entropy(np.concatenate([t[1:] for t in val])), rel=1e-12)
  assert not glob.glob(os.path.join(out, '*.tmp'))


def test_bpe_and_workers_give_the_same_shards(tmp_path):
  write_jsonl(tmp_path / 'a.jsonl', texts(60))
  # val_fraction 0.5: 60 documents never give an empty validation split,
  # whatever tmp_path (their names, FILE:LINE, decide the split) is.
  one = prepare.prepare(f'{tmp_path}/a.jsonl', str(tmp_path / 'one'), tokenizer='bpe',
                        shard_mb=0.001, bpe_vocab_size=300, val_fraction=0.5)
  two = prepare.prepare(f'{tmp_path}/a.jsonl', str(tmp_path / 'two'), tokenizer='bpe',
                        shard_mb=0.001, bpe_vocab_size=300, workers=2, val_fraction=0.5)
  assert one['tokenizer']['fingerprint'].startswith('bpe:')
  assert one['tokenizer']['fingerprint'] == two['tokenizer']['fingerprint']
  assert _shards(str(tmp_path / 'one')) == _shards(str(tmp_path / 'two'))
  # The BPE is trained on training documents only, and the shards hold its ids.
  docs, tok = shard_records(str(tmp_path / 'one'), one, 'train')
  assert max(int(d.max()) for d in docs) >= 259 and tok.vocab_size <= 300
  # A tokenizer.json given by path is copied in and used as is.
  path = tmp_path / 'tok.json'
  train_bpe(texts(20, seed=3), 280).save(str(path))
  third = prepare.prepare(f'{tmp_path}/a.jsonl', str(tmp_path / 'three'), tokenizer=str(path),
                          val_fraction=0.5)
  assert prepared.load_tokenizer(str(tmp_path / 'three'), third).vocab_size <= 280


def _cli(*args, **kwargs):
  return subprocess.run([sys.executable, '-m', 'moe_jax.data.prepare', '--progress=false', *args],
                        capture_output=True, text=True, cwd=_REPO, check=False,
                        env=dict(os.environ, PYTHONPATH=_REPO), **kwargs)


def test_kill_9_then_the_same_command_ends_with_the_same_shards(tmp_path):
  write_jsonl(tmp_path / 'a.jsonl', texts(400))
  args = [f'--src={tmp_path}/a.jsonl', '--shard_mb=0.0005', '--val_fraction=0.1']
  straight = _cli(*args, f'--out={tmp_path}/straight')
  assert straight.returncode == 0, straight.stderr
  out = tmp_path / 'killed'
  proc = subprocess.Popen(
      [sys.executable, '-m', 'moe_jax.data.prepare', '--progress=false', *args, f'--out={out}'],
      cwd=_REPO, env=dict(os.environ, PYTHONPATH=_REPO), stderr=subprocess.DEVNULL)
  manifest = out / prepared.MANIFEST
  deadline = time.time() + 120
  while time.time() < deadline:   # kill once a few units are written
    try:
      if len(json.loads(manifest.read_text())['units']) >= 3:
        break
    except (OSError, ValueError):
      pass
    time.sleep(0.005)
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  cut = json.loads(manifest.read_text())
  assert not cut['complete'] and 3 <= len(cut['units'])
  with pytest.raises(ConfigError, match='did not finish'):
    prepared.read_manifest(str(out))
  resumed = _cli(*args, f'--out={out}')
  assert resumed.returncode == 0, resumed.stderr
  assert _shards(str(out)) == _shards(str(tmp_path / 'straight'))
  assert json.loads(manifest.read_text()) == json.loads(
      (tmp_path / 'straight' / prepared.MANIFEST).read_text())
  # Another tokenizer or source list on resume: refused in one line, nothing changed.
  before = _shards(str(out))
  other = _cli(*args, f'--out={out}', '--tokenizer=bpe')
  assert other.returncode == 2 and other.stderr.count('\n') == 1
  assert other.stderr.startswith(f'error: {manifest}: --tokenizer differs')
  write_jsonl(tmp_path / 'b.jsonl', texts(3))
  more = _cli(f'--src={tmp_path}/*.jsonl', *args[1:], f'--out={out}')
  assert more.returncode == 2 and '--src differs' in more.stderr
  assert _shards(str(out)) == before


@pytest.mark.parametrize('case', ['empty', 'missing', 'binary', 'no_field', 'not_json',
                                  'not_parquet', 'out_holds_src', 'out_not_empty'])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, case):
  src, out = tmp_path / 'src', tmp_path / 'out'
  src.mkdir()
  write_jsonl(src / 'good.jsonl', texts(30))
  pattern, extra, want = f'{src}/*.jsonl', [], None
  if case == 'empty':
    pattern, want = ' , ', '--src is empty'
  elif case == 'missing':
    pattern, want = f'{src}/none*.jsonl', 'matches no files'
  elif case == 'binary':
    (src / 'blob.bin').write_bytes(bytes(range(256)) * 4)
    pattern, want = f'{src}/blob.bin', f'{src}/blob.bin: not a text file'
  elif case == 'no_field':
    with open(src / 'good.jsonl', 'a') as f:
      f.write('{"body": "x"}\n')
    want = f"{src}/good.jsonl:31: no string field 'text'"
  elif case == 'not_json':
    (src / 'good.jsonl').write_text('just words\n')
    want = f'{src}/good.jsonl:1: not a JSON line'
  elif case == 'not_parquet':
    (src / 'x.parquet').write_text('text')
    pattern, want = f'{src}/x.parquet', f'{src}/x.parquet: not a Parquet file'
  elif case == 'out_holds_src':
    out, want = src, 'holds the source'
  else:
    out.mkdir()
    (out / 'notes.txt').write_text('mine')
    want = 'is not empty'
  before = sorted(os.listdir(out)) if out.exists() else None
  result = _cli(f'--src={pattern}', f'--out={out}', '--shard_mb=0.0003', *extra)
  assert result.returncode == 2, result.stderr
  assert result.stderr.startswith('error: ') and result.stderr.count('\n') == 1, result.stderr
  assert want in result.stderr
  if case in ('no_field',):   # found mid-stream: complete units stay, no temporary files
    left = os.listdir(out)
    assert not [n for n in left if n.endswith('.tmp')]
    assert not json.loads((out / prepared.MANIFEST).read_text())['complete']
  else:
    assert (sorted(os.listdir(out)) if out.exists() else None) == before
