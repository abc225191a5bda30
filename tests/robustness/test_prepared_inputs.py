"""data.prepare and training on its corpora: bad input is one `error:` line with
nothing written (a damaged shard refused before the workdir exists), valid
input that holds no text is counted, prepare removes only its own files, and
a workdir trained on a prepared BPE corpus outlives the corpus directory."""
import json
import os
import shutil
import signal

import numpy as np
import pyarrow
import pyarrow.parquet as pq
import pytest

from moe_jax.data import prepare, prepared
from moe_jax.errors import ConfigError, RunError
from tests.data.test_prepare import texts, write_jsonl
from tests.robustness import rows
from tests.robustness.rows import param
from tests.train import tiny


@pytest.fixture(scope='module')
def corpora(tmp_path_factory):
  """{'byte': DIR, 'bpe': DIR}: 400 documents each, a few units of shards."""
  root = tmp_path_factory.mktemp('corpora')
  write_jsonl(root / 'a.jsonl', texts(400))
  out = {}
  for name, extra in (('byte', {}), ('bpe', dict(bpe_vocab_size=300))):
    out[name] = str(root / name)
    prepare.prepare(f'{root}/a.jsonl', out[name], tokenizer=name, val_fraction=0.2,
                    shard_mb=0.01, **extra)
  return out


def _shard(corpus, k=0, suffix='.array_record'):
  shard = prepared.read_manifest(corpus)['splits']['train']['shards'][k]['file']
  return os.path.join(corpus, shard.replace('.array_record', suffix))


def _zero(path):
  with open(path, 'r+b') as f:
    f.write(bytes(os.path.getsize(path)))


def _edit_lengths(path):
  lengths = np.load(path)
  lengths[0] += 1
  with open(path, 'wb') as f:
    np.save(f, lengths)


_TRAIN = '--config={cfg} --workdir={tmp}/run --config.data.source=prepared --config.data.path={copy}'


def _damaged(damage):
  """A row setup: damages {copy}, rows.check's private copy of the byte corpus."""
  def setup(p):
    prepared.opened.cache_clear()
    if damage:
      damage(p['copy'])
  return setup


TRAIN_ROWS = [
    ('shard_zeroed', lambda c: _zero(_shard(c)), r'shard .*train-00000.array_record'),
    ('lengths_edited', lambda c: _edit_lengths(_shard(c, 0, '.lengths.npy')),
     r'train-00000.lengths.npy does not match the manifest'),
    ('lengths_deleted', lambda c: os.remove(_shard(c, 1, '.lengths.npy')),
     r'train-00001.lengths.npy: cannot read'),
    ('bpe_key_on_a_byte_corpus', None, r'data.tokenizer=bpe, but .*manifest.json holds byte '
     'tokens'),
]


@pytest.mark.parametrize('case', TRAIN_ROWS, ids=lambda c: c[0])
def test_training_refuses_before_the_workdir_exists(cli, corpora, tmp_path, case):
  name, damage, pattern = case
  args = _TRAIN + (' --config.data.tokenizer=bpe' if damage is None else '')
  row = rows.Row(args.split(), pattern, _damaged(damage))
  rows.check(cli, 'moe_jax.main', row, tmp_path, corpora['byte'])
  assert not os.path.exists(tmp_path / 'run')


def test_a_workdir_outlives_its_bpe_corpus(cli, corpora, tmp_path):
  from moe_jax.train import trainer  # pylint: disable=g-import-not-at-top
  corpus = str(tmp_path / 'corpus')
  shutil.copytree(corpora['bpe'], corpus)
  run = str(tmp_path / 'run')
  trainer.train_and_evaluate(tiny.config(**{
      'total_steps': 1, 'checkpoint_every_steps': 1, 'eval_every_steps': 0,
      'data.source': 'prepared', 'data.path': corpus}), run)
  shutil.move(corpus, str(tmp_path / 'moved'))
  prepared.opened.cache_clear()
  sample = cli.run('moe_jax.generate', f'--ckpt={run}', '--prompt=thou', '--max_new_tokens=2',
                   cwd=tmp_path)
  assert sample.rc == 0, sample.stderr
  exported = cli.run('moe_jax.interop.export_hf', f'--ckpt={run}', f'--out={tmp_path}/hf',
                     cwd=tmp_path)
  assert exported.rc == 0, exported.stderr
  assert os.path.isfile(tmp_path / 'hf' / 'tokenizer.json')


PREPARE_ROWS = [
    param('shard_mb_nan', '--progress=false --src={tmp}/a.jsonl --out={tmp}/out --shard_mb=nan',
          r'--shard_mb=nan must be a finite number > 0'),
    param('bpe_sample_mb_zero', '--progress=false --src={tmp}/a.jsonl --out={tmp}/out --tokenizer=bpe '
          '--bpe_sample_mb=0', r'--bpe_sample_mb=0.0 must be a finite number > 0'),
    param('bpe_vocab_size_huge', '--progress=false --src={tmp}/a.jsonl --out={tmp}/out --tokenizer=bpe '
          '--bpe_vocab_size=100000000', r'--bpe_vocab_size=100000000 exceeds 1048576'),
    param('empty_input', '--progress=false --src={tmp}/empty.jsonl --out={tmp}/out',
          r'the train split is empty \(0 documents'),
]


@pytest.mark.parametrize('row', PREPARE_ROWS)
def test_prepare_refuses_bad_input(cli, tmp_path, row):
  write_jsonl(tmp_path / 'a.jsonl', texts(20))
  (tmp_path / 'empty.jsonl').write_text('\n')
  rows.check(cli, 'moe_jax.data.prepare', row, tmp_path, str(tmp_path / 'a.jsonl'))
  assert not os.path.exists(tmp_path / 'out')


def test_empty_input_into_an_empty_directory_leaves_it_empty(tmp_path):
  (tmp_path / 'empty.jsonl').write_text('\n')
  (tmp_path / 'out').mkdir()
  with pytest.raises(ConfigError, match='split is empty'):
    prepare.prepare(f'{tmp_path}/empty.jsonl', str(tmp_path / 'out'))
  assert os.listdir(tmp_path / 'out') == []


@pytest.mark.parametrize('out_exists', [False, True], ids=['new_out', 'empty_out'])
def test_a_split_left_empty_leaves_no_out_behind(tmp_path, out_exists):
  write_jsonl(tmp_path / 'a.jsonl', texts(1))   # one document: the validation split is empty
  if out_exists:
    (tmp_path / 'out').mkdir()
  with pytest.raises(ConfigError, match=r'the validation split is empty \(1 documents'):
    prepare.prepare(f'{tmp_path}/a.jsonl', str(tmp_path / 'out'), val_fraction=0.01)
  assert os.listdir(tmp_path / 'out') == [] if out_exists else not os.path.exists(tmp_path / 'out')


def test_resume_removes_only_its_own_temporary_files(tmp_path):
  write_jsonl(tmp_path / 'a.jsonl', texts(60))
  out = tmp_path / 'out'
  manifest = prepare.prepare(f'{tmp_path}/a.jsonl', str(out), val_fraction=0.2, shard_mb=0.001)
  manifest['complete'] = False   # as a kill leaves it, with its leftovers and a user's file
  (out / prepared.MANIFEST).write_text(json.dumps(manifest))
  for name in ('train-00099.array_record.tmp', '.manifest.json.x1y2.tmp', 'notes.tmp'):
    (out / name).write_text('x')
  prepare.prepare(f'{tmp_path}/a.jsonl', str(out), val_fraction=0.2, shard_mb=0.001)
  assert sorted(n for n in os.listdir(out) if n.endswith('.tmp')) == ['notes.tmp']


def test_lone_surrogates_and_parquet_nulls_are_counted(tmp_path, capsys):
  lines = [json.dumps(dict(text=t)) for t in texts(40)]
  lines[3] = '{"text": "half \\ud800 a pair \\udfff"}'
  (tmp_path / 'a.jsonl').write_text('\n'.join(lines) + '\n')
  column = texts(40)
  column[5] = column[9] = None
  pq.write_table(pyarrow.table({'text': column}), tmp_path / 'b.parquet')
  manifest = prepare.prepare(f'{tmp_path}/a.jsonl,{tmp_path}/b.parquet', str(tmp_path / 'out'),
                             val_fraction=0.3)
  assert manifest['input'] == dict(null_texts=2, lone_surrogates=2)
  assert manifest['splits']['train']['docs'] + manifest['splits']['validation']['docs'] == 78
  err = capsys.readouterr().err.splitlines()
  assert err == [f'warning: 2 Parquet null(s) in the text column skipped (the first at '
                 f'{tmp_path}/b.parquet:6)',
                 f'warning: 2 lone surrogate(s) replaced by U+FFFD (the first at '
                 f'{tmp_path}/a.jsonl:4)']


def test_a_full_disk_is_one_line_and_the_same_command_resumes(tmp_path, small_filesystem):
  write_jsonl(tmp_path / 'a.jsonl', texts(600))
  fs = small_filesystem(96 * 1024)
  out = os.path.join(fs, 'out')
  args = (f'{tmp_path}/a.jsonl', out)
  with pytest.raises((RunError, OSError)) as info:
    prepare.prepare(*args, val_fraction=0.2, shard_mb=0.005)
  assert '\n' not in str(info.value)
  assert not [n for n in os.listdir(out) if n.endswith('.tmp')]
  done = len(json.loads(open(os.path.join(out, prepared.MANIFEST)).read())['units'])
  shutil.move(out, tmp_path / 'out')   # room again
  manifest = prepare.prepare(f'{tmp_path}/a.jsonl', str(tmp_path / 'out'), val_fraction=0.2,
                             shard_mb=0.005)
  assert manifest['complete'] and len(manifest['units']) > done


def test_a_json_line_nested_too_deep_is_an_error_naming_it(tmp_path):
  depth = 100_000
  (tmp_path / 'a.jsonl').write_text('{"text": "a"}\n' + '{"text": "b", "x": ' + '[' * depth +
                                    ']' * depth + '}\n')
  with pytest.raises(ConfigError, match=r'a.jsonl:2: a JSON line nested deeper than the reader '
                     r'can follow'):
    prepare.prepare(f'{tmp_path}/a.jsonl', str(tmp_path / 'out'))
  assert not os.path.exists(tmp_path / 'out')


def _killed(*_):
  """A unit's writer that dies as the OOM killer kills (imported by the worker)."""
  os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_worker_is_an_error_and_the_same_command_resumes(tmp_path, monkeypatch):
  write_jsonl(tmp_path / 'a.jsonl', texts(60))
  monkeypatch.setattr(prepare, '_write_unit', _killed)
  with pytest.raises(RunError, match=r'^a worker process died while writing a unit .* run the '
                     'same command again to resume'):
    prepare.prepare(f'{tmp_path}/a.jsonl', str(tmp_path / 'out'), workers=2, val_fraction=0.2,
                    shard_mb=0.001)
  monkeypatch.undo()
  manifest = prepare.prepare(f'{tmp_path}/a.jsonl', str(tmp_path / 'out'), workers=2,
                             val_fraction=0.2, shard_mb=0.001)
  assert manifest['complete'] and manifest['splits']['train']['docs'] + manifest['splits'][
      'validation']['docs'] == 60
