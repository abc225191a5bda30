"""The Pallas MoE FFN (interpret mode) against the loop-over-experts reference,
forward and backward (x, gates, wi_0, wi_1, wo).

T=37 is not a multiple of any tile. Errors are measured relative to the
largest reference entry of each tensor (elementwise relative error is
meaningless for entries near zero): f32 within 1e-5, bf16 within 2e-2.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import backend
from moe_jax.kernels import moe_ffn
from moe_jax.kernels import reference
from tests.kernels import routings

NUM_TOKENS, D_MODEL, D_FF = 37, 32, 48
TOL = {'float32': 1e-5, 'bfloat16': 2e-2}


def _inputs(routing, num_experts, top_k, dtype):
  idx = routings.make_idx(routing, NUM_TOKENS, num_experts, top_k)
  gates = routings.make_gates(NUM_TOKENS, top_k)
  ks = jax.random.split(jax.random.PRNGKey(top_k * 100 + num_experts), 5)
  x = jax.random.normal(ks[0], (NUM_TOKENS, D_MODEL))
  w0 = jax.random.normal(ks[1], (num_experts, D_MODEL, D_FF)) / D_MODEL**0.5
  w1 = jax.random.normal(ks[2], (num_experts, D_MODEL, D_FF)) / D_MODEL**0.5
  wo = jax.random.normal(ks[3], (num_experts, D_FF, D_MODEL)) / D_FF**0.5
  ct = jax.random.normal(ks[4], (NUM_TOKENS, D_MODEL))
  cast = lambda a: a.astype(dtype)
  return (cast(x), jnp.asarray(idx), cast(jnp.asarray(gates)), cast(w0),
          cast(w1), cast(wo)), ct


@functools.partial(jax.jit, static_argnums=(0,))
def _value_and_grads(fn, ct, x, idx, gates, w0, w1, wo):
  def loss(x, gates, w0, w1, wo):
    y = fn(x, idx, gates, w0, w1, wo)
    return jnp.sum(y.astype(jnp.float32) * ct), y
  (_, y), grads = jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4),
                                     has_aux=True)(x, gates, w0, w1, wo)
  return y, grads


# One function object per kernel style, so jit's cache is shared across cases.
_INTERPRET = functools.partial(moe_ffn.moe_ffn,
                               backend=backend.resolve('interpret'))
_MOSAIC = functools.partial(
    moe_ffn.moe_ffn, backend=backend.resolve('interpret', kernels='mosaic'))


def _check(pallas_fn, routing, num_experts, top_k, dtype):
  args, ct = _inputs(routing, num_experts, top_k, dtype)
  _check_args(pallas_fn, args, ct, dtype)


def _check_args(pallas_fn, args, ct, dtype):
  got = _value_and_grads(pallas_fn, ct, *args)
  want = _value_and_grads(reference.moe_ffn, ct, *args)
  names = ['y', 'dx', 'dgates', 'dwi_0', 'dwi_1', 'dwo']
  for name, g, w in zip(names, jax.tree.leaves(got), jax.tree.leaves(want)):
    assert g.dtype == w.dtype and g.shape == w.shape, name
    g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
    err = np.max(np.abs(g - w)) / np.max(np.abs(w))
    assert err <= TOL[dtype], f'{name}: relative error {err:.2e}'
  return got


@pytest.mark.parametrize('routing', routings.ROUTINGS)
def test_matches_reference_f32_top2(routing):
  _check(_INTERPRET, routing, 8, 2, 'float32')


@pytest.mark.parametrize('routing', ['uniform', 'all_to_one'])
def test_no_expert_index_matches_reference_on_routed_assignments(routing):
  """idx = num_experts ("no expert") on every third assignment: y and every
  gradient equal the reference over the routed assignments alone (which
  skips that index too), and those gates get exactly zero gradient."""
  (x, idx, gates, w0, w1, wo), ct = _inputs(routing, 8, 2, 'float32')
  unrouted = (np.arange(idx.size) % 3 == 0).reshape(idx.shape)
  idx = jnp.where(unrouted, 8, idx)
  y, (dx, dgates, *_) = _check_args(_INTERPRET, (x, idx, gates, w0, w1, wo),
                                    ct, 'float32')
  assert np.all(np.asarray(dgates)[unrouted] == 0)
  assert np.all(np.isfinite(y)) and np.all(np.isfinite(dx))
  # The routed assignments alone, gates of the rest zeroed: the same y.
  routed_y = reference.moe_ffn(x, jnp.where(unrouted, 0, idx),
                               jnp.where(unrouted, 0, gates), w0, w1, wo)
  np.testing.assert_allclose(y, routed_y, atol=1e-5)


def test_all_unrouted_gives_zero():
  (x, idx, gates, w0, w1, wo), ct = _inputs('uniform', 4, 1, 'float32')
  y, grads = _value_and_grads(_INTERPRET, ct, x, jnp.full_like(idx, 4), gates,
                              w0, w1, wo)
  for a in (y, *grads):
    assert not np.any(np.asarray(a))


def _slow_but(fast, cases):
  """`cases` as pytest params, all slow-marked except `fast`: one small case
  keeps the path in the default suite, the grid runs with -m slow."""
  return [pytest.param(*c, marks=() if c == fast else pytest.mark.slow) for c in cases]


@pytest.mark.parametrize('routing,num_experts,top_k,dtype', _slow_but(
    ('uniform', 4, 1, 'bfloat16'),
    [(r, e, k, d) for e, k, d in [(4, 1, 'float32'), (16, 8, 'float32'), (4, 1, 'bfloat16'),
                                  (8, 2, 'bfloat16'), (16, 8, 'bfloat16')]
     for r in routings.ROUTINGS]))
def test_matches_reference(routing, num_experts, top_k, dtype):
  _check(_INTERPRET, routing, num_experts, top_k, dtype)


@pytest.mark.parametrize('routing', _slow_but(('uniform',), [(r,) for r in routings.ROUTINGS]))
def test_mosaic_kernels_match_reference(routing):
  _check(_MOSAIC, routing, 8, 2, 'float32')


def test_missing_backend_is_a_config_error():
  with pytest.raises(ConfigError, match="backend='gpu' needs a GPU"):
    backend.resolve('gpu')
  with pytest.raises(ConfigError, match='is not one of'):
    backend.resolve('cuda')


def test_auto_backend_on_cpu_is_interpret():
  assert backend.resolve(None).name == 'interpret'


def test_shape_mismatch_is_a_config_error():
  (x, idx, gates, w0, w1, wo), _ = _inputs('uniform', 4, 2, 'float32')
  with pytest.raises(ConfigError, match='idx_Tk'):
    moe_ffn.moe_ffn(x, idx[:, :1], gates, w0, w1, wo)
