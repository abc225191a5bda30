"""remat.checkpoint: the same gradients as no remat, and every block's
recomputation tied to its cotangent (models/remat.py says why).

The train step's equivalence under each policy is in
tests/train/test_memory_paths.py; here a two-block chain isolates the tie.
"""
import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.models import remat, transformer
from tests.models import fixtures


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


def _named_block(w_DF, x_BD, i):
  """A block whose saveable values all differ in shape: a dot without batch
  dimensions, a batched dot, and the two names save_moe keeps."""
  h_BF = jnp.sin(x_BD @ w_DF)                                        # (3, 12)
  h_GBK = h_BF.reshape(3, 2, 6).swapaxes(0, 1)
  s_GBB = jnp.einsum('gbk,gck->gbc', h_GBK, h_GBK)                   # (2, 3, 3)
  gates_B = checkpoint_name(jax.nn.sigmoid(s_GBB.sum((0, 2))), remat.MOE_ROUTING)   # (3,)
  y_BE = checkpoint_name(jnp.cos(h_BF[:, :4]) * gates_B[:, None], remat.MOE_OUT)    # (3, 4)
  return jnp.tanh(y_BE), i + 1


_INPUTS = [(3, 5), (5, 12)]


@pytest.mark.parametrize('policy, saved', [
    ('full', _INPUTS),
    ('save_dots', _INPUTS + [(2, 3, 3), (3, 12)]),
    ('save_dots_no_batch', _INPUTS + [(3, 12)]),
    ('save_moe', _INPUTS + [(3,), (3, 4)])])
def test_each_policy_saves_its_values(policy, saved):
  """The residuals jax.vjp keeps for the backward pass are the block's inputs
  and exactly what the policy names (gradients alone cannot tell: remat
  changes what is stored, not what is computed)."""
  w_DF = jax.random.normal(jax.random.key(0), (5, 12)) / 3
  x_BD = jax.random.normal(jax.random.key(1), (3, 5))
  _, pullback = jax.vjp(remat.checkpoint(_named_block, policy), w_DF, x_BD, jnp.int32(0))
  assert sorted(v.shape for v in jax.tree.leaves(pullback)) == sorted(saved)


def test_the_moe_layer_names_what_save_moe_keeps():
  """save_moe keeps values by name: the MoE layer must tag its routing and
  output, or the policy silently becomes 'full'."""
  cfg = fixtures.tiny_model_config(num_experts=4, top_k=2)
  model = transformer.Transformer(cfg)
  tokens_BL = jnp.zeros((2, 8), jnp.int32)
  params = jax.eval_shape(model.init, jax.random.key(0), tokens_BL)
  jaxpr = str(jax.make_jaxpr(lambda p: model.apply(p, tokens_BL))(params))
  assert f'name={remat.MOE_ROUTING}' in jaxpr and f'name={remat.MOE_OUT}' in jaxpr
