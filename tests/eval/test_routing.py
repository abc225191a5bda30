"""Routing analysis by token type: groups of known text, the captured routing
against the model's own expert counts, and `inspect --routing` end to end."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from moe_jax.data import tokenizer
from moe_jax.eval import routing
from moe_jax.models import config as model_config, transformer
from moe_jax.train import trainer
from tests.train import tiny

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_groups_of_a_known_text():
  tok = tokenizer.ByteTokenizer()
  text = 'ROMEO:\nAh, 2 me!\n'
  tokens = tok.encode(text)[None]
  valid = np.ones_like(tokens, bool)
  valid[0, -1] = False   # the last newline: padding
  g = routing.token_groups(tokens, valid, tok)
  chars = np.array(list(text))
  assert ''.join(chars[g['speaker'][0]]) == 'ROMEO:'
  assert ''.join(chars[g['capital'][0]]) == 'ROMEOA'
  assert ''.join(chars[g['punctuation'][0]]) == ':,!'
  assert ''.join(chars[g['digit'][0]]) == '2'
  assert ''.join(chars[g['whitespace'][0]]) == '\n  '   # the padded last newline is left out
  assert not any(g[k][0, -1] for k in routing.GROUPS)
  # The most common ids make (at least) half the valid tokens.
  assert g['frequent'][0].sum() >= valid.sum() / 2
  assert (g['rare'][0] == valid[0]).all()   # 16 valid tokens, none seen 3 times
  # The bundled plays' markdown speaker lines.
  text = '**ROMEO**\nAh **me**\n'
  g = routing.token_groups(tok.encode(text)[None], np.ones((1, len(text)), bool), tok)
  assert ''.join(np.array(list(text))[g['speaker'][0]]) == '**ROMEO**'


def test_mutual_information():
  assert routing.mutual_information(np.array([[5, 5], [5, 5]])) == pytest.approx(0.0)
  assert routing.mutual_information(np.array([[9, 0], [0, 9]])) == pytest.approx(1.0)


def test_captured_routing_matches_the_models_expert_counts():
  config = tiny.config(**{'model.vocab_size': 259, 'moe.router_init_std': 0.5})
  cfg = model_config.from_config(config)
  model = transformer.Transformer(cfg)
  params = model.init(jax.random.key(0), np.zeros((1, 8), np.int32))['params']
  rng = np.random.default_rng(0)
  segment_ids = np.ones((2, 16), np.int32)
  segment_ids[1, 10:] = 0
  batch = dict(inputs=rng.integers(3, 259, (2, 16)).astype(np.int32), segment_ids=segment_ids,
               positions=np.tile(np.arange(16, dtype=np.int32), (2, 1)))
  idx = jax.jit(lambda p, b: routing.experts_of(model, p, b))(params, batch)
  forward = lambda p, b: model.apply({'params': p}, b['inputs'], segment_ids=b['segment_ids'],
                                    positions=b['positions'])
  _, aux = jax.jit(forward)(params, batch)
  assert sorted(idx) == sorted(aux['moe']) == ['layers_0', 'layers_1']
  valid = segment_ids > 0
  for layer, idx_BLk in idx.items():
    counts = np.bincount(np.asarray(idx_BLk)[valid].ravel(), minlength=4)
    np.testing.assert_array_equal(counts, aux['moe'][layer]['counts'])
    assert len(np.unique(np.asarray(idx_BLk))) > 1


@pytest.fixture(scope='module')
def moe_workdir(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('moe') / 'run')
  trainer.train_and_evaluate(tiny.config(total_steps=2, eval_every_steps=0,
                                         checkpoint_every_steps=2), workdir)
  return workdir


def _inspect(*args):
  return subprocess.run([sys.executable, '-m', 'moe_jax.inspect', *args], cwd=_REPO,
                        env=dict(os.environ, PYTHONPATH=_REPO), capture_output=True, text=True,
                        check=False)


def test_inspect_routing_cli(moe_workdir, tmp_path):
  plot = str(tmp_path / 'r.png')
  proc = _inspect(f'--ckpt={moe_workdir}', '--routing', '--batches=1', f'--plot={plot}')
  assert proc.returncode == 0, proc.stderr
  for layer in ('layers_0', 'layers_1'):
    assert f'{layer}: I(char class; expert) =' in proc.stdout
  for group in routing.GROUPS:
    assert f'| {group} |' in proc.stdout
  assert '| layers_1 | 2 |' in proc.stdout   # load CV / dead experts at the last logged step
  assert os.path.getsize(plot) > 0
  with open(tmp_path / 'r.json') as f:
    result = json.load(f)
  assert result['step'] == 2 and result['tokens'] == 8 * 32
  all_E = result['layers']['layers_0']['counts']['all']
  assert len(all_E) == 4 and sum(all_E) == 2 * result['tokens']
  history = result['load_over_training']['layers_0']
  assert [row[0] for row in history] == [1, 2]
  assert all(row[3] is not None and row[4] in (0, 1) for row in history)   # seed 001's health
  # The analysis' health is seed 001's monitor of the counted load.
  load = np.asarray(all_E) / sum(all_E)
  cv = np.std(load) / np.mean(load)
  h = result['layers']['layers_0']['health']
  assert h['dead_1pct'] == int(np.sum(load < 0.01))
  assert h['healthy'] == bool(cv < 0.3 and load.min() > 0.02)
  np.testing.assert_allclose(h['cv'], cv, rtol=1e-5)
  assert routing.health_line(h) in proc.stdout


def test_inspect_of_no_checkpoint_is_a_one_line_error(tmp_path):
  proc = _inspect(f'--ckpt={tmp_path}/none', '--routing')
  assert proc.returncode == 2 and proc.stderr.strip().startswith('error:')
  assert os.listdir(tmp_path) == []
