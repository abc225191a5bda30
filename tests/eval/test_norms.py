"""Layer-wise weight norms (seed 003 Fig. 2): the numbers, what depth growth does
to the profile, and `python -m moe_jax.inspect --norms` on a saved checkpoint."""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from moe_jax import inspect as inspect_cli
from moe_jax.errors import ConfigError
from moe_jax.eval import norms
from moe_jax.upcycle import mapping, paths, recipes
from moe_jax.workdir import checkpoint, files
from tests.upcycle import toy

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _interleaved():
  """4 layers, MoE every 2nd (layers 1 and 3), 4 experts; layer i scaled by i+1
  so every layer has its own norms."""
  c = toy.config(num_experts=4, layers=4, every=2)
  p = toy.params(c, seed=0)
  scale = lambda k: int(k.split('_')[1]) + 1 if k.startswith('layers_') else 1
  return c, {k: jax.tree.map(lambda w, s=scale(k): w * s, v) for k, v in p.items()}


def test_norms_by_hand():
  c, params = _interleaved()
  got = norms.layer_norms(params)
  assert list(got) == ['layers_0', 'layers_1', 'layers_2', 'layers_3']
  flat = paths.flatten(params)
  fro = lambda w: float(np.sqrt(np.sum(np.square(w))))
  for i in range(4):
    p = f'layers_{i}/'
    attn = [fro(flat[p + f'attn/{n}']) for n in 'qkvo']
    if i % 2:   # MoE: one norm per expert matrix
      ffn = [fro(w) for n in ('wi_0', 'wi_1', 'wo') for w in flat[p + f'moe/experts/{n}']]
      assert len(ffn) == 12
      assert float(got[f'layers_{i}']['router']) == pytest.approx(fro(flat[p + 'moe/router/w']))
    else:
      ffn = [fro(flat[p + f'mlp/{n}']) for n in ('wi_0', 'wi_1', 'wo')]
      assert 'router' not in got[f'layers_{i}']
    want = dict(attn=np.mean(attn), ffn=np.mean(ffn), weights=np.mean(attn + ffn),
                norm=np.mean([fro(flat[p + 'attn_norm/scale']), fro(flat[p + 'mlp_norm/scale'])]))
    for g, v in want.items():
      assert float(got[f'layers_{i}'][g]) == pytest.approx(v, rel=1e-5), (i, g)
  assert norms.flat(got)['norms/layers_3/ffn'] == pytest.approx(float(got['layers_3']['ffn']))


@pytest.mark.parametrize('method,order', [('interpose', [0, 0, 1, 1]), ('stack', [0, 1, 0, 1])])
def test_depth_growth_and_the_norm_profile(method, order):
  """Seed 003 §3.1: interposition keeps the profile's order (each norm twice in a
  row), stacking repeats the whole profile (eqs. 2 and 1)."""
  src_c = toy.config(num_experts=4, layers=2)
  src = toy.params(src_c, seed=0)
  src = dict(src, layers_1=jax.tree.map(lambda w: 3 * w, src['layers_1']))
  dst_c = toy.config(num_experts=4, layers=4)
  dst = mapping.transform(recipes.build('grow_depth', src_c, dst_c, dict(method=method)), src,
                          toy.abstract(dst_c), jax.random.key(0))
  before = [float(v['weights']) for v in norms.layer_norms(src).values()]
  after = [float(v['weights']) for v in norms.layer_norms(dst).values()]
  np.testing.assert_allclose(after, [before[i] for i in order], rtol=1e-6)


def _saved_workdir(root, name='run', step=7):
  """A workdir with a config.json and one params checkpoint: no training."""
  c, params = _interleaved()
  workdir = os.path.join(root, name)
  os.makedirs(workdir)
  files.write_config(workdir, c)
  manager = checkpoint.Manager(os.path.join(workdir, files.CHECKPOINTS), async_save=False)
  manager.save(step, params)
  manager.close()
  return workdir, params


def _inspect_in_process(workdir):
  return inspect_cli.run([workdir], True, '')


def _inspect_subprocess(workdir):
  env = dict(os.environ, PYTHONPATH=_REPO, JAX_PLATFORMS='cpu')
  proc = subprocess.run([sys.executable, '-m', 'moe_jax.inspect', f'--ckpt={workdir}', '--norms'],
                        capture_output=True, text=True, env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr
  return proc.stdout


# What `python -m moe_jax.inspect --norms` prints is run()'s text; the CLI
# itself (a fresh interpreter, ~15-50 s here) is the slow variant.
@pytest.mark.parametrize('inspect', [
    _inspect_in_process, pytest.param(_inspect_subprocess, marks=pytest.mark.slow)])
def test_inspect_prints_and_plots(inspect, tmp_path):
  workdir, params = _saved_workdir(str(tmp_path))
  lines = inspect(workdir).strip().splitlines()
  assert lines[0].split() == ['checkpoint', 'layer', 'weights', 'attn', 'ffn', 'router', 'norm']
  rows = [l.split() for l in lines[1:5]]
  assert [r[:2] for r in rows] == [['run@7', str(i)] for i in range(4)]
  want = norms.layer_norms(params)
  assert [float(r[2]) for r in rows] == pytest.approx(
      [float(v['weights']) for v in want.values()], abs=1e-3)
  # A read-only command: no plot unless --plot names one.
  assert lines[-1] == 'plot: none (pass --plot=PNG to write one)'
  assert not os.path.exists(os.path.join(workdir, 'plots'))


def test_inspect_compares_checkpoints_and_refuses_bad_input(tmp_path):
  a, _ = _saved_workdir(str(tmp_path), 'a', step=3)
  b, _ = _saved_workdir(str(tmp_path), 'b', step=5)
  text, png = inspect_cli.inspect_norms([a, os.path.join(b, 'checkpoints', '5')],
                                        str(tmp_path / 'cmp.png'))
  assert {l.split()[0] for l in text.splitlines()[1:]} == {'a@3', 'b@5'}
  assert os.path.getsize(png) > 0
  with pytest.raises(ConfigError, match='pass exactly one of --norms and --routing'):
    inspect_cli.run([a], False, '')
  with pytest.raises(ConfigError, match='does not exist'):
    inspect_cli.run([str(tmp_path / 'missing')], True, '')
  with pytest.raises(ConfigError, match=r'--plot=.*cmp\.pdf must end in \.png'):
    inspect_cli.run([a], True, str(tmp_path / 'cmp.pdf'))
  assert not os.path.exists(tmp_path / 'cmp.pdf')
