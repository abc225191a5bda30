"""Every dispatch path equals the loop-over-experts reference, forward and grads."""
import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import reference
from moe_jax.models import dispatch
from tests.models import fixtures

_ARGS = ('x_TD', 'idx_Tk', 'gates_Tk', 'wi_0_EDF', 'wi_1_EDF', 'wo_EFD')
_DIFF = ('x_TD', 'gates_Tk', 'wi_0_EDF', 'wi_1_EDF', 'wo_EFD')


def _call(fn, inputs):
  return fn(*(inputs[a] for a in _ARGS))


@functools.lru_cache(maxsize=None)
def _forward_and_grads_fn(name, capacity_factor):
  """Jitted (y, grads of <y, r>) for one path; cached so routings share a compile."""
  fn = reference.moe_ffn if name == 'reference' else dispatch.get(name, capacity_factor)

  def loss(diff, inputs, r_TD):
    out = _call(fn, dict(inputs, **diff))
    y_TD = out[0] if isinstance(out, tuple) else out
    return jnp.sum(y_TD * r_TD), out

  def run(inputs, r_TD):
    grads, out = jax.grad(loss, has_aux=True)({a: inputs[a] for a in _DIFF}, inputs, r_TD)
    return out, grads
  return jax.jit(run)


def _forward_and_grads(name, inputs, capacity_factor=None):
  r_TD = jax.random.normal(jax.random.key(1), inputs['x_TD'].shape)
  return _forward_and_grads_fn(name, capacity_factor)(inputs, r_TD)


_CASES = ([(kind, 37, 8, 2) for kind in fixtures.ROUTINGS]
          + [('uniform', 5, 6, 3), ('skewed', 1, 4, 1)])


@pytest.mark.parametrize('name', ['einsum', 'ragged', 'grouped'])
@pytest.mark.parametrize('kind,tokens,experts,top_k', _CASES)
def test_matches_reference(name, kind, tokens, experts, top_k):
  inputs = fixtures.moe_inputs(kind, tokens=tokens, experts=experts, top_k=top_k)
  # Capacity factor E / k gives C = T: no expert can overflow.
  (y_TD, dropped), got = _forward_and_grads(name, inputs, experts / top_k)
  want_TD, want = _forward_and_grads('reference', inputs)
  np.testing.assert_allclose(y_TD, want_TD, atol=1e-5, rtol=1e-5)
  assert float(dropped) == 0.0
  for a in _DIFF:
    np.testing.assert_allclose(got[a], want[a], atol=1e-5, rtol=1e-5, err_msg=a)


def _kept_by_capacity(idx_Tk, experts, cap):
  """Hand simulation of GShard priority: all first choices, then second choices."""
  fill = np.zeros(experts, int)
  keep = np.zeros(idx_Tk.shape, bool)
  for j in range(idx_Tk.shape[1]):
    for t in range(idx_Tk.shape[0]):
      e = idx_Tk[t, j]
      if fill[e] < cap:
        fill[e] += 1
        keep[t, j] = True
  return keep


@pytest.mark.parametrize('kind', ['all_to_one', 'skewed'])
def test_einsum_drops_and_counts_overflow(kind):
  inputs = fixtures.moe_inputs(kind, tokens=37, experts=8, top_k=2)
  cap = dispatch.capacity(37, 2, 8, 1.0)
  assert cap == 10   # ceil(1.0 * 37 * 2 / 8)
  keep = _kept_by_capacity(np.asarray(inputs['idx_Tk']), 8, cap)
  assert not keep.all()
  fn = jax.jit(dispatch.get('einsum', capacity_factor=1.0))
  y_TD, dropped = _call(fn, inputs)
  np.testing.assert_allclose(dropped, 1.0 - keep.mean(), rtol=1e-6)
  # What is kept equals the reference with the dropped assignments' gates zeroed.
  want_TD = _call(reference.moe_ffn, dict(inputs, gates_Tk=inputs['gates_Tk'] * keep))
  np.testing.assert_allclose(y_TD, want_TD, atol=1e-5, rtol=1e-5)


def test_einsum_zero_gate_takes_no_slot():
  inputs = fixtures.moe_inputs('all_to_one', tokens=8, experts=4, top_k=1)
  gates_Tk = inputs['gates_Tk'].at[:4].set(0.0)   # e.g. padding, ahead in the queue
  # All 8 tokens pick the same expert and C = ceil(2 * 8 * 1 / 4) = 4: if the
  # 4 zero-gate assignments took slots, half the real ones would be dropped.
  fn = jax.jit(dispatch.get('einsum', capacity_factor=2.0))
  y_TD, dropped = _call(fn, dict(inputs, gates_Tk=gates_Tk))
  assert dispatch.capacity(8, 1, 4, 2.0) == 4
  assert float(dropped) == 0.0
  np.testing.assert_allclose(y_TD, _call(reference.moe_ffn, dict(inputs, gates_Tk=gates_Tk)),
                             atol=1e-5)


def test_auto_resolves_per_platform():
  assert dispatch.resolve('auto', 'cpu') == 'grouped'
  assert dispatch.resolve('auto', 'tpu') == 'ragged'
  assert dispatch.resolve('einsum', 'cpu') == 'einsum'
  assert dispatch.get('auto') is dispatch.get(dispatch.resolve('auto'))


def test_auto_on_gpu_is_pallas_only_where_it_was_measured_faster():
  """bf16 on one device, dims the Triton kernels tile (docs/benchmarks/gpu.md);
  elsewhere ragged."""
  bf16 = dict(dtype='bfloat16', dims=(512, 1024), devices=1)
  assert dispatch.resolve('auto', 'gpu', **bf16) == 'pallas'
  assert dispatch.resolve('auto', 'gpu', **dict(bf16, dtype='float16')) == 'pallas'
  assert dispatch.resolve('auto', 'gpu', **dict(bf16, dims=(320, 1280))) == 'pallas'
  assert dispatch.resolve('auto', 'gpu', **dict(bf16, dtype='float32')) == 'ragged'
  assert dispatch.resolve('auto', 'gpu', **dict(bf16, devices=2)) == 'ragged'
  assert dispatch.resolve('auto', 'gpu', **dict(bf16, dims=(512, 24))) == 'ragged'
  assert dispatch.resolve('auto', 'gpu') == 'ragged'   # nothing known of the layer
  assert dispatch.resolve('ragged', 'gpu', **bf16) == 'ragged'


def test_unknown_dispatch_is_config_error():
  with pytest.raises(ConfigError, match='moe.dispatch'):
    dispatch.get('sorted')


def test_pallas_mosaic_gpu_matches_reference_forward(monkeypatch):
  """The Mosaic GPU grouped matmuls (interpret mode) under the dispatch name,
  bf16 at their 64-wide interpret tiles; forward only, since jax 0.10's
  interpreter cannot run their backward (tests/kernels/test_gmm_mgpu.py)."""
  from moe_jax.kernels import gmm_mgpu  # pylint: disable=g-import-not-at-top
  calls = []
  monkeypatch.setattr(gmm_mgpu, 'gmm', lambda *a, _gmm=gmm_mgpu.gmm, **kw: (
      calls.append(1), _gmm(*a, **kw))[1])
  inputs = fixtures.moe_inputs('skewed', tokens=40, experts=4, top_k=2, d=64, f=128)
  bf16 = {a: v.astype(jnp.bfloat16) if v.dtype == jnp.float32 else v
          for a, v in inputs.items()}
  y_TD, dropped = _call(dispatch.get('pallas_mosaic_gpu'), bf16)
  want_TD = _call(reference.moe_ffn, inputs)
  assert y_TD.dtype == jnp.bfloat16 and float(dropped) == 0.0
  err = np.max(np.abs(np.asarray(y_TD, np.float32) - want_TD)) / np.max(np.abs(want_TD))
  assert err <= 2e-2, err
  assert len(calls) == 3   # wi_0, wi_1 and wo ran on the Mosaic GPU kernels


def test_pallas_without_kernel_is_config_error(monkeypatch):
  # A None entry in sys.modules makes the import fail as if the file were absent.
  monkeypatch.setitem(sys.modules, 'moe_jax.kernels.moe_ffn', None)
  inputs = fixtures.moe_inputs('uniform', tokens=4, experts=4, top_k=1)
  with pytest.raises(ConfigError, match="moe.dispatch='pallas'"):
    _call(dispatch.get('pallas'), inputs)


def test_get_resolves_auto_with_the_layer(monkeypatch):
  """The MoE layer's dtype and dims reach 'auto' (as on a GPU, where it is 'pallas')."""
  monkeypatch.setitem(dispatch.AUTO, 'cpu', 'pallas')
  assert dispatch.get('auto', dtype='bfloat16', dims=(64, 128)) is dispatch.pallas
  assert dispatch.get('auto', dtype='float32', dims=(64, 128)) is dispatch.ragged
