"""The fused SwiGLU gate of the Mosaic GPU kernels (gmm_mgpu.gmm_glu and
gmm_glu_bwd, gmm.swiglu_gate, moe_ffn with fuse_gate) in Mosaic GPU's
interpret mode against numpy, jax.vjp and the unfused path, and lowered for
CUDA on this CPU host.

The kernels round their f32 results once to bf16 (the operand type), so the
kernel outputs are held to that rounding: 2**-8 of the exact value, plus
test_gmm_mgpu.py's 1e-4 for the f32 sums' own error. Gradients through the
input- and weight-gradient products and the layer compare bf16 with f32 (or
with the unfused bf16 path) as test_moe_ffn.py does: within 2e-2 of each
tensor's largest entry. Those products read transposed refs, which jax 0.10's
interpreter cannot, so they run under jax >= 0.11 (test_gmm_mgpu.py).

Rows past num_tiles hold NaN: the kernels must not read them. Padding rows
inside used tiles hold finite garbage, computed like any row and checked.
"""
import collections
import dataclasses
import functools
import re

import jax
from jax import export
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import backend
from moe_jax.kernels import expert_sort
from moe_jax.kernels import gmm
from moe_jax.kernels import gmm_mgpu
from moe_jax.kernels import moe_ffn
from tests.kernels import routings
from tests.kernels import test_gmm_mgpu
from tests.kernels import test_moe_ffn

NUM_EXPERTS, D_DIM, F_DIM = test_gmm_mgpu.NUM_EXPERTS, 128, 256   # its routing
RTOL, ATOL = 2.0**-8, 1e-4
needs_transposes = test_gmm_mgpu.needs_transposes


def _case(b=None, seed=0):
  """Routing (two of four experts empty), x, wi_0, wi_1, a cotangent da, and
  per row: used (inside num_tiles) and its group, at b's tiles."""
  b, r, used, group = test_gmm_mgpu.routed(b, seed)
  rows = used.shape[0]
  rng = np.random.default_rng(seed)

  def rows_of(cols):   # garbage in padding rows, NaN past num_tiles
    v = rng.normal(size=(rows, cols))
    return jnp.asarray(np.where(used[:, None], v, np.nan), jnp.bfloat16)

  w0, w1 = (jnp.asarray(rng.normal(size=(NUM_EXPERTS, D_DIM, F_DIM))
                        / D_DIM**0.5, jnp.bfloat16) for _ in range(2))
  return b, r, rows_of(D_DIM), w0, w1, rows_of(F_DIM), used, group


def _f32(a):
  return np.asarray(a, np.float32)


def _products(x, w0, w1, used, group):
  """h0, h1 in f64 on the used rows (0 elsewhere): exact for bf16 inputs."""
  x64 = np.where(used[:, None], np.asarray(x, np.float64), 0)
  return (np.einsum('rd,rdf->rf', x64, np.asarray(w, np.float64)[group])
          for w in (w0, w1))


def test_gate_matches_numpy(b=None):
  b, r, x, w0, w1, _, used, group = _case(b)
  assert int(r.num_tiles[0]) < r.tile_group_M.shape[0]   # unused tiles exist
  assert not np.isin([2, 3], np.asarray(r.tile_group_M)).any()   # empty
  h0, h1 = _products(x, w0, w1, used, group)
  want = h0 / (1 + np.exp(-h0)) * h1
  got = gmm_mgpu.gmm_glu(x, w0, w1, r, b)
  assert got.dtype == jnp.bfloat16 and got.shape == want.shape
  np.testing.assert_allclose(_f32(got), want, rtol=RTOL, atol=ATOL)


def test_gate_backward_matches_jax_vjp(b=None):
  """dh0, dh1 of the kernel against jax.vjp of silu(h0) * h1 (not the
  kernel's silu' formula), with NaN in da past num_tiles."""
  b, r, x, w0, w1, da, used, group = _case(b)
  h0, h1 = _products(x, w0, w1, used, group)
  _, vjp = jax.vjp(lambda a, c: jax.nn.silu(a) * c, h0.astype(np.float32),
                   h1.astype(np.float32))
  want_dh0, want_dh1 = (np.where(used[:, None], d, 0)
                        for d in vjp(jnp.asarray(np.nan_to_num(_f32(da)))))
  got_dh0, got_dh1 = gmm_mgpu.gmm_glu_bwd(x, w0, w1, da, r, b)
  for got, want in ((got_dh0, want_dh0), (got_dh1, want_dh1)):
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(_f32(got), want, rtol=RTOL, atol=ATOL)


def _max_rel_err(got, want):
  got, want = _f32(got), _f32(want)
  return np.max(np.abs(got - want)) / np.max(np.abs(want))


@needs_transposes
def test_gate_gradients_match_jax_grad_of_unfused(b=None):
  """dx, dwi_0, dwi_1 of the custom VJP (recompute, two input-gradient
  products, two weight gradients) against jax.grad of the unfused gate in
  f32; the empty experts' weight gradients are exactly zero."""
  b, r, x, w0, w1, ct, used, group = _case(b)
  ct = jnp.where(used[:, None], ct, 0).astype(jnp.float32)

  def unfused(x, w0, w1):
    x = jnp.where(used[:, None], x.astype(jnp.float32), 0)
    h0, h1 = (jnp.einsum('rd,rdf->rf', x, w.astype(jnp.float32)[group])
              for w in (w0, w1))
    return jax.nn.silu(h0) * h1

  def loss(fn):
    return lambda *a: jnp.sum(fn(*a).astype(jnp.float32) * ct)

  want = jax.grad(loss(unfused), argnums=(0, 1, 2))(x, w0, w1)
  got = jax.grad(loss(lambda *a: gmm.swiglu_gate(*a, r, b)),
                 argnums=(0, 1, 2))(x, w0, w1)
  for name, g, w in zip(('dx', 'dwi_0', 'dwi_1'), got, want):
    assert g.dtype == jnp.bfloat16, name
    err = _max_rel_err(g, w)
    assert err <= test_moe_ffn.TOL['bfloat16'], f'{name}: {err:.2e}'
  assert not np.any(_f32(got[0])[~used])
  assert not np.any(_f32(got[1])[2:]) and not np.any(_f32(got[2])[2:])


# moe_ffn at the interpret tiles: D a multiple of tile_k (64), F of the
# gate's column tile (32) and of tile_n (64, for wo's input gradient).
_LAYER = dict(num_tokens=37, d_model=64, d_ff=128, num_experts=4, top_k=2)


def _layer_inputs(routing):
  t, d, f, e, k = _LAYER.values()
  idx = routings.make_idx(routing, t, e, k)
  gates = routings.make_gates(t, k)
  ks = jax.random.split(jax.random.PRNGKey(0), 5)
  x = jax.random.normal(ks[0], (t, d))
  w0, w1 = (jax.random.normal(kk, (e, d, f)) / d**0.5 for kk in ks[1:3])
  wo = jax.random.normal(ks[3], (e, f, d)) / f**0.5
  bf16 = lambda a: a.astype(jnp.bfloat16)
  return ((bf16(x), jnp.asarray(idx), bf16(jnp.asarray(gates)), bf16(w0),
           bf16(w1), bf16(wo)), jax.random.normal(ks[4], (t, d)))


def _layer(fuse_gate):
  b = backend.resolve('interpret', kernels='mosaic_gpu', fuse_gate=fuse_gate)
  return functools.partial(moe_ffn.moe_ffn, backend=b)


@pytest.fixture
def gate_calls(monkeypatch):
  """Counts the fused gate kernels' calls."""
  calls = collections.Counter()
  for name in ('gmm_glu', 'gmm_glu_bwd'):
    monkeypatch.setattr(gmm_mgpu, name, lambda *a, _f=getattr(gmm_mgpu, name),
                        _name=name, **kw: (calls.update([_name]),
                                           _f(*a, **kw))[1])
  return calls


@pytest.mark.parametrize('routing', ['skewed', 'empty_experts'])
def test_layer_forward_fused_matches_unfused(routing, gate_calls):
  args, _ = _layer_inputs(routing)
  unfused = _layer(False)(*args)
  assert not gate_calls
  fused = _layer(True)(*args)
  assert gate_calls == {'gmm_glu': 1}
  assert fused.dtype == unfused.dtype == jnp.bfloat16
  assert _max_rel_err(fused, unfused) <= test_moe_ffn.TOL['bfloat16']


@needs_transposes
@pytest.mark.parametrize('routing', ['skewed', 'empty_experts'])
def test_layer_gradients_fused_match_unfused(routing, gate_calls):
  args, ct = _layer_inputs(routing)
  unfused = test_moe_ffn._value_and_grads(_layer(False), ct, *args)  # pylint: disable=protected-access
  fused = test_moe_ffn._value_and_grads(_layer(True), ct, *args)  # pylint: disable=protected-access
  assert set(gate_calls) == {'gmm_glu', 'gmm_glu_bwd'}
  names = ['y', 'dx', 'dgates', 'dwi_0', 'dwi_1', 'dwo']
  for name, g, w in zip(names, jax.tree.leaves(fused),
                        jax.tree.leaves(unfused)):
    assert g.dtype == w.dtype, name
    err = _max_rel_err(g, w)
    assert err <= test_moe_ffn.TOL['bfloat16'], f'{name}: {err:.2e}'


def test_f32_operands_keep_the_unfused_gate(gate_calls):
  """wgmma would round f32 to TF32: f32 keeps two Triton gmms and XLA's
  silu * mul, fuse_gate or not."""
  args, _ = _layer_inputs('uniform')
  f32 = [a.astype(jnp.float32) if a.dtype == jnp.bfloat16 else a
         for a in args]
  _layer(True)(*f32)
  assert not gate_calls


def test_gate_tile_off_the_swizzle_is_a_config_error():
  b, r, x, w0, w1, _, _, _ = _case()
  with pytest.raises(ConfigError, match='tile_n=16 gives 8 columns'):
    gmm_mgpu.gmm_glu(x, w0, w1, r, dataclasses.replace(b, tile_n=16))
  with pytest.raises(ConfigError, match=r'gate output dim \(tile_n / 2\)=48'):
    gmm_mgpu.gmm_glu(x, w0[..., :48], w1[..., :48], r, b)


def test_fuse_gate_must_be_a_bool():
  with pytest.raises(ConfigError, match="fuse_gate='no'"):
    backend.resolve('interpret', kernels='mosaic_gpu', fuse_gate='no')


@pytest.mark.parametrize('tile_n,swizzle', [(128, 128), (64, 64)])
def test_gate_kernels_lower_for_cuda(tile_n, swizzle):
  """Both gate kernels lower through Mosaic GPU (layout inference, one
  swizzle for x and the weights, TMA) at the GPU preset's tiles (64 columns
  a weight) and at tile_n 64 (32 columns, a 64-byte swizzle); three operand
  tiles a stage keep four stages beside the backward's da, dh0 and dh1."""
  gpu = test_gmm_mgpu._gpu_backend(tile_n=tile_n)  # pylint: disable=protected-access
  experts, d, f, t, k = 8, 256, 512, 512, 2
  rows = expert_sort.buffer_tiles(t * k, experts, gpu.tile_m) * gpu.tile_m
  shapes = (((rows, d), jnp.bfloat16), ((experts, d, f), jnp.bfloat16))
  x, w = (jax.ShapeDtypeStruct(s, dt) for s, dt in shapes)
  assert gmm_mgpu._gate_setup(x, w, w, gpu, 3) == (tile_n // 2, swizzle, 4)  # pylint: disable=protected-access

  def gate(x_RD, idx_Tk, w0_EDF, w1_EDF, da_RF):
    r = expert_sort.route(idx_Tk, experts, gpu.tile_m)
    return (gmm_mgpu.gmm_glu(x_RD, w0_EDF, w1_EDF, r, gpu),
            gmm_mgpu.gmm_glu_bwd(x_RD, w0_EDF, w1_EDF, da_RF, r, gpu))

  text = test_gmm_mgpu._lowered(  # pylint: disable=protected-access
      gate, *shapes[:1], ((t, k), jnp.int32), shapes[1], shapes[1],
      ((rows, f), jnp.bfloat16))
  # Routing metadata (2) + x, wi_0, wi_1 forward; + da backward.
  assert _mosaic_gpu_operands(text) == {5: 1, 6: 1}


def _mosaic_gpu_operands(text):
  """Operand count -> Mosaic GPU calls in a lowered module: the kernels carry
  no name there, but the gate kernels take more operands than a product."""
  calls = re.findall(r'custom_call @mosaic_gpu\w*\(([^)]*)\)', text)
  return collections.Counter(len(c.split(',')) for c in calls)


@pytest.mark.parametrize('fuse_gate,want', [
    (True, {5: 1, 6: 1, 4: 7}),    # gate fwd, gate bwd, wo's 3 + 4 products
    (False, {4: 9})])              # three gmms and their six backward kernels
def test_layer_lowers_for_cuda_at_gpu_tiles(fuse_gate, want):
  """The layer's forward + backward with kernels='mosaic_gpu' lowers for
  CUDA, fused or not, and fuse_gate picks the kernels."""
  gpu = dataclasses.replace(test_gmm_mgpu._gpu_backend(), fuse_gate=fuse_gate)  # pylint: disable=protected-access
  t, d, f, e, k = 256, 256, 512, 8, 2

  def loss(*args):
    return jnp.sum(moe_ffn.moe_ffn(*args, backend=gpu).astype(jnp.float32))

  shapes = [((t, d), jnp.bfloat16), ((t, k), jnp.int32),
            ((t, k), jnp.bfloat16), ((e, d, f), jnp.bfloat16),
            ((e, d, f), jnp.bfloat16), ((e, f, d), jnp.bfloat16)]
  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 2, 3, 4, 5)))
  text = export.export(
      grad, platforms=['cuda'],
      disabled_checks=[export.DisabledSafetyCheck.custom_call(
          '__gpu$xla.gpu.triton')])(
              *(jax.ShapeDtypeStruct(s, dt) for s, dt in shapes)).mlir_module()
  assert _mosaic_gpu_operands(text) == want
