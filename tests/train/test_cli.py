"""The command-line contracts: one-line errors that write nothing, and the
evaluator's JSON line."""
import json
import os
import subprocess
import sys

import pytest

from moe_jax.errors import ConfigError
from moe_jax.train import trainer
from tests.train import tiny

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TINY = ['--config=configs/lm_moe.py:tiny', '--config.total_steps=2', '--config.seq_len=16']


def _run(module, *args):
  env = dict(os.environ, PYTHONPATH=_REPO)
  return subprocess.run([sys.executable, '-m', module, *args], cwd=_REPO, env=env,
                        capture_output=True, text=True, check=False)


@pytest.mark.parametrize('override, message', [
    ('--config.bogus=3', "config has no key 'bogus'"),
    ('--config.total_steps=-1', 'total_steps=-1 must be a positive integer'),
    ('--config.moe.top_k=9', 'moe.top_k=9 must be in [1, moe.num_experts=8]'),
    ('--config.data.tokenizer=bpe --config.moe.top_k=9', 'moe.top_k=9'),  # before BPE writes
    ('--config.moe.dispatch=fast', "moe.dispatch='fast' is not one of"),
    ('--config.model.num_kv_heads=3', 'model.num_heads=4 is not divisible by model.num_kv_heads=3'),
    ('--config.batch_size=12', 'batch_size=12 is not divisible'),
    ('--config.data.source=text_files', 'data.patterns'),
    ('--config.init_from=/no/such/ckpt', "init_from='/no/such/ckpt' does not exist"),
    ('--config.opt.decay_fraction=1.5', 'opt.decay_fraction=1.5 must be in [0.0, 1.0]'),
    ('--config.opt.lr=0', 'opt.lr=0.0 must be > 0.0'),
    ('--config=configs/lm_moe.py:huge', "model preset 'huge' is not one of"),
])
def test_bad_config_is_one_line_and_writes_nothing(tmp_path, override, message):
  workdir = tmp_path / 'run'
  proc = _run('moe_jax.main', *_TINY, f'--workdir={workdir}', *override.split())
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: ') and message in lines[0], proc.stderr
  assert not workdir.exists()


def test_workdir_of_another_shape_is_refused(tmp_path):
  workdir = str(tmp_path / 'run')
  trainer.train_and_evaluate(tiny.config(total_steps=1), workdir)
  before = sorted(os.listdir(workdir))
  with pytest.raises(ConfigError, match=r'model\.d_model: workdir 32 vs requested 64'):
    trainer.train_and_evaluate(tiny.config(**{'model.d_model': 64}), workdir)
  assert sorted(os.listdir(workdir)) == before


def test_evaluate_prints_json(tmp_path):
  workdir = str(tmp_path / 'run')
  trainer.train_and_evaluate(tiny.config(total_steps=3), workdir)
  proc = _run('moe_jax.evaluate', f'--ckpt={workdir}', '--batches=1')
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result['step'] == 3 and result['val_tokens'] > 0 and 0 < result['val_loss'] < 10
  # A step directory works too, and gives the same loss.
  proc = _run('moe_jax.evaluate', f'--ckpt={workdir}/checkpoints/3', '--batches=1')
  assert json.loads(proc.stdout.strip().splitlines()[-1])['val_loss'] == result['val_loss']


def test_init_from_of_another_shape_is_refused_before_writing(tmp_path):
  source = str(tmp_path / 'source')
  trainer.train_and_evaluate(tiny.config(total_steps=1), source)
  target = tmp_path / 'target'
  with pytest.raises(ConfigError, match=r'does not match the config'):
    trainer.train_and_evaluate(tiny.config(**{'init_from': source, 'model.d_ff': 32}),
                               str(target))
  assert not target.exists()


def test_resume_with_another_data_stream_is_refused(tmp_path):
  workdir = str(tmp_path / 'run')
  trainer.train_and_evaluate(tiny.config(total_steps=1), workdir)
  with pytest.raises(ConfigError, match=r'another data stream \(seed: workdir 0 vs requested 1'):
    trainer.train_and_evaluate(tiny.config(total_steps=2, seed=1), workdir)
