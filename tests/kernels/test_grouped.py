"""The grouped loop (moe_jax/kernels/grouped.py) equals the reference: output
and every gradient, with tiles larger than most groups (tests/models/
test_expert_sort.py runs the default tile, 8 rows here, several per group), and
with the "no expert" index that expert parallelism uses."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.kernels import grouped, reference
from tests.models import fixtures

_DIFF = ('x_TD', 'gates_Tk', 'wi_0_EDF', 'wi_1_EDF', 'wo_EFD')


@functools.partial(jax.jit, static_argnums=(0, 1))
def _value_and_grads(fn, tile_m, inputs, r_TD):
  def loss(diff):
    a = dict(inputs, **diff)
    y_TD = fn(a['x_TD'], a['idx_Tk'], a['gates_Tk'], a['wi_0_EDF'], a['wi_1_EDF'], a['wo_EFD'],
              **({'tile_m': tile_m} if tile_m else {}))
    return jnp.sum(y_TD * r_TD), y_TD
  return jax.grad(loss, has_aux=True)({a: inputs[a] for a in _DIFF})


def _check(inputs, tile_m, want_inputs=None, none_Tk=False):
  r_TD = jax.random.normal(jax.random.key(1), inputs['x_TD'].shape)
  got, y_TD = _value_and_grads(grouped.moe_ffn, tile_m, inputs, r_TD)
  want, want_TD = _value_and_grads(reference.moe_ffn, None, want_inputs or inputs, r_TD)
  want['gates_Tk'] = jnp.where(none_Tk, 0.0, want['gates_Tk'])
  np.testing.assert_allclose(y_TD, want_TD, atol=1e-5, rtol=1e-5)
  for a in _DIFF:
    np.testing.assert_allclose(got[a], want[a], atol=1e-5, rtol=1e-5, err_msg=a)


@pytest.mark.parametrize('kind', fixtures.ROUTINGS)
def test_large_tiles_match_reference(kind):
  _check(fixtures.moe_inputs(kind, tokens=37, experts=8, top_k=2), 64)


def test_no_expert_index_adds_nothing():
  inputs = fixtures.moe_inputs('uniform', tokens=37, experts=4, top_k=2)
  none_Tk = np.zeros((37, 2), bool)
  none_Tk[::3, 1] = True   # every third token's second choice goes nowhere
  idx_Tk = jnp.where(none_Tk, 4, inputs['idx_Tk'])
  # Same as the reference with those assignments' gates zeroed, and their
  # gates' gradients 0.
  want = dict(inputs, gates_Tk=jnp.where(none_Tk, 0.0, inputs['gates_Tk']))
  _check(dict(inputs, idx_Tk=idx_Tk), 8, want_inputs=want, none_Tk=none_Tk)


def test_tile_rows_bounds_the_padding():
  assert grouped.tile_rows(8192, 16) == 128
  assert grouped.tile_rows(4096, 16) == 64
  assert grouped.tile_rows(74, 8) == 8          # tiny inputs: the smallest tile
  for a, e in [(4096, 8), (8192, 32), (100, 3)]:
    m = grouped.tile_rows(a, e)
    assert m == 8 or e * m <= a // 4
