"""The compiled kernels on a real GPU or TPU against the reference.

Skipped on CPU, where tests/kernels/test_moe_ffn.py checks the same kernel
bodies in interpret mode. On a device this is the first run of what Triton or
Mosaic actually compiled, so it repeats the interpret-mode cases with the
native backend, plus one case big enough for the device presets' real tiles
(128-row tiles on GPU, 256 on TPU) to span many tiles per expert. f32 runs at
`jax.default_matmul_precision('highest')`: by default both the kernels and
XLA's reference would use TF32 on GPU, and 1e-5 is an f32 tolerance.
"""
import functools

import jax
import jax.numpy as jnp
import pytest

from moe_jax.kernels import backend
from moe_jax.kernels import moe_ffn
from tests.kernels import routings
from tests.kernels import test_gate_mgpu
from tests.kernels import test_gmm_mgpu
from tests.kernels import test_moe_ffn as interpret_tests

pytestmark = pytest.mark.skipif(
    jax.default_backend() not in ('gpu', 'tpu'),
    reason='needs a GPU or TPU; interpret mode is tests/kernels/test_moe_ffn.py')

NATIVE = functools.partial(moe_ffn.moe_ffn, backend=None)


@pytest.mark.parametrize('routing', routings.ROUTINGS)
@pytest.mark.parametrize('num_experts,top_k', [(4, 1), (8, 2), (16, 8)])
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_native_kernels_match_reference(routing, num_experts, top_k, dtype):
  with jax.default_matmul_precision('highest'):
    interpret_tests._check(NATIVE, routing, num_experts, top_k, dtype)  # pylint: disable=protected-access


@pytest.mark.parametrize('routing', ['uniform', 'skewed', 'empty_experts'])
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_native_kernels_match_reference_at_device_tiles(routing, dtype):
  _device_tiles_case(NATIVE, routing, dtype)


def _device_tiles_case(fn, routing, dtype):
  num_tokens, d_model, d_ff, num_experts, top_k = 1000, 256, 512, 64, 8
  idx = routings.make_idx(routing, num_tokens, num_experts, top_k)
  gates = routings.make_gates(num_tokens, top_k)
  ks = jax.random.split(jax.random.PRNGKey(0), 5)
  shapes = [(num_tokens, d_model), (num_experts, d_model, d_ff),
            (num_experts, d_model, d_ff), (num_experts, d_ff, d_model)]
  x, w0, w1, wo = (jax.random.normal(k, s) / s[-2 if len(s) == 3 else -1]**0.5
                   for k, s in zip(ks, shapes))
  ct = jax.random.normal(ks[4], (num_tokens, d_model))
  args = tuple(a.astype(dtype) if a.dtype == jnp.float32 else a for a in
               (x, jnp.asarray(idx), jnp.asarray(gates), w0, w1, wo))
  with jax.default_matmul_precision('highest'):
    interpret_tests._check_args(fn, args, ct, dtype)  # pylint: disable=protected-access


needs_gpu = pytest.mark.skipif(jax.default_backend() != 'gpu',
                               reason='Mosaic GPU kernels need a GPU')


@needs_gpu
@pytest.mark.parametrize('module,check', [
    (test_gmm_mgpu, 'test_gmm_matches_numpy'),
    (test_gmm_mgpu, 'test_input_grad_matches_numpy'),
    (test_gmm_mgpu, 'test_weight_grad_matches_numpy'),
    (test_gate_mgpu, 'test_gate_matches_numpy'),
    (test_gate_mgpu, 'test_gate_backward_matches_jax_vjp'),
    (test_gate_mgpu, 'test_gate_gradients_match_jax_grad_of_unfused')])
def test_mosaic_gpu_kernels_at_device_tiles(module, check):
  getattr(module, check)(backend.resolve('gpu', kernels='mosaic_gpu'))


@needs_gpu
@pytest.mark.parametrize('routing', ['uniform', 'skewed', 'empty_experts'])
@pytest.mark.parametrize('fuse_gate', [True, False])
def test_mosaic_gpu_kernels_match_reference_at_device_tiles(routing, fuse_gate):
  mosaic_gpu = functools.partial(
      moe_ffn.moe_ffn, backend=backend.resolve('gpu', kernels='mosaic_gpu',
                                               fuse_gate=fuse_gate))
  _device_tiles_case(mosaic_gpu, routing, 'bfloat16')
