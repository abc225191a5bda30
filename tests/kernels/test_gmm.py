"""Grouped matmul kernels (both kernel styles, interpret mode) against numpy
per-group products, including empty groups and unused tiles."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.kernels import backend
from moe_jax.kernels import expert_sort
from moe_jax.kernels import gmm
from tests.kernels import routings


def _case(kernels, seed=0):
  num_experts, k_dim, n_dim = 8, 32, 48
  b = backend.resolve('interpret', kernels=kernels)
  idx_Tk = routings.make_idx('empty_experts', 37, num_experts, 2, seed)
  r = expert_sort.route(idx_Tk, num_experts, b.tile_m)
  rows = r.row_token_R.shape[0]
  rng = np.random.default_rng(seed)
  # Zero padding rows, as dispatch produces them; unused tiles get garbage
  # that the kernels must ignore.
  valid = (np.asarray(r.row_assign_R) >= 0)[:, None]
  lhs = np.where(valid, rng.normal(size=(rows, k_dim)), 7.0).astype(np.float32)
  dout = np.where(valid, rng.normal(size=(rows, n_dim)), 7.0).astype(np.float32)
  rhs = rng.normal(size=(num_experts, k_dim, n_dim)).astype(np.float32)
  return b, r, lhs, rhs, dout, valid


def _group_of_row(r):
  tm = r.row_token_R.shape[0] // r.tile_group_M.shape[0]
  return np.repeat(np.asarray(r.tile_group_M), tm)


@pytest.mark.parametrize('kernels', ['triton', 'mosaic'])
def test_gmm_and_input_grad_match_numpy(kernels):
  b, r, lhs, rhs, dout, _ = _case(kernels)
  used = np.arange(lhs.shape[0]) < int(r.num_tiles[0]) * b.tile_m
  g = _group_of_row(r)
  want = np.where(used[:, None], np.einsum('rk,rkn->rn', lhs, rhs[g]), 0)
  got = gmm.gmm_raw(jnp.asarray(lhs), jnp.asarray(rhs), r, b)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  want_t = np.where(used[:, None], np.einsum('rn,rkn->rk', dout, rhs[g]), 0)
  got_t = gmm.gmm_raw(jnp.asarray(dout), jnp.asarray(rhs), r, b,
                      transpose_rhs=True)
  np.testing.assert_allclose(got_t, want_t, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('kernels', ['triton', 'mosaic'])
def test_weight_grad_matches_numpy(kernels):
  b, r, lhs, _, dout, valid = _case(kernels)
  g = _group_of_row(r)
  lhs0, dout0 = lhs * valid, dout * valid
  want = np.stack([lhs0[g == e].T @ dout0[g == e] for e in range(8)])
  assert np.all(want[4:] == 0)   # the empty experts
  # Padding rows of the used tiles are zero as from dispatch; the garbage
  # in unused tiles must not leak in.
  used = (np.arange(lhs.shape[0]) < int(r.num_tiles[0]) * b.tile_m)[:, None]
  got = gmm.tgmm_raw(jnp.asarray(np.where(used, lhs0, 7.0)),
                     jnp.asarray(np.where(used, dout0, 7.0)), r, b,
                     jnp.float32)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gmm_vjp_matches_autodiff_of_per_row_matmul():
  b, r, lhs, rhs, dout, valid = _case('triton')
  lhs = lhs * valid
  g = jnp.asarray(_group_of_row(r))

  def dense(lhs_RK, rhs_EKN):
    return jnp.einsum('rk,rkn->rn', lhs_RK, rhs_EKN[g]) * valid

  want = jax.vjp(dense, lhs, rhs)[1](dout * valid)
  got = jax.vjp(lambda a, w: gmm.gmm(a, w, r, b), lhs, rhs)[1](dout * valid)
  for x, y in zip(got, want):
    np.testing.assert_allclose(x * (1 if x.ndim == 3 else valid), y,
                               rtol=1e-5, atol=1e-5)
