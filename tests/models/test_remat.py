"""remat.checkpoint: the same gradients as no remat, and every block's
recomputation tied to its cotangent (models/remat.py says why).

The train step's equivalence under each policy is in
tests/train/test_memory_paths.py; here a two-block chain isolates the tie.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.models import remat


def _block(w_DD, x_BD, i):
  """A block with a matmul, an elementwise tail and an integer output, as a
  decoder block's stats are."""
  y_BD = jnp.tanh(jnp.sin(x_BD @ w_DD) @ w_DD)
  return y_BD, i + 1


def _loss(block):
  def loss(w_DD, x_BD):
    y_BD, i = block(w_DD, x_BD, jnp.int32(0))
    y_BD, _ = block(w_DD, y_BD, i)
    return jnp.sum(y_BD ** 2)
  return loss


@pytest.mark.parametrize('policy', ['full', 'save_dots', 'save_dots_no_batch', 'save_moe'])
def test_each_backward_is_tied_into_the_chain(policy, monkeypatch):
  ties = []
  after = remat._after  # pylint: disable=protected-access

  def record(x, tree):
    ties.append((x.shape, tuple(v.shape for v in jax.tree.leaves(tree)
                                if jnp.issubdtype(v.dtype, jnp.floating))))
    return after(x, tree)

  monkeypatch.setattr(remat, '_after', record)
  w_DD = jax.random.normal(jax.random.key(0), (8, 8)) / 3
  x_BD = jax.random.normal(jax.random.key(1), (4, 8))
  got = jax.jit(jax.grad(_loss(remat.checkpoint(_block, policy)), argnums=(0, 1)))(w_DD, x_BD)
  want = jax.grad(_loss(_block), argnums=(0, 1))(w_DD, x_BD)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
  # Per block: the saved w and x wait for the cotangent y, and dx for dw.
  per_block = [((8, 8), ((4, 8),)), ((4, 8), ((4, 8),)), ((4, 8), ((8, 8),))]
  assert sorted(ties) == sorted(per_block * 2)


def test_none_is_the_function_itself():
  assert remat.checkpoint(_block, 'none') is _block
