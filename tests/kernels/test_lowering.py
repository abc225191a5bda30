"""The GPU and TPU kernels lower for their platforms, checked on CPU.

`jax.export` lowers for a platform the machine lacks, and Pallas runs its
Triton (GPU) and Mosaic (TPU) lowering in Python, so CI catches what a GPU or
TPU would reject before compiling: block shapes Triton or Mosaic refuse,
primitives with no lowering rule, a kernel that falls back to XLA. What is not
checked here is the vendor compiler after that (Triton to PTX, Mosaic in
libtpu), nor speed: that is experiments/bench/moe_layer.py's job.
"""
import collections
import dataclasses
import re

import jax
from jax import export
import jax.numpy as jnp
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import attention_gpu
from moe_jax.kernels import backend
from moe_jax.kernels import moe_ffn

# Each kernel launch of one forward+backward of the MoE FFN: dispatch, three
# grouped matmuls and combine forward; per matmul an input-gradient matmul
# and a weight-gradient kernel, and the two permutes swapped, backward.
# On TPU only the grouped matmuls are Pallas (permute.py says why).
KERNELS = {
    'cuda': {'moe_dispatch': 2, 'moe_gmm': 6, 'moe_tgmm': 3, 'moe_combine': 2,
             'moe_gate_grad': 1},
    'tpu': {'moe_gmm_tpu': 6, 'moe_tgmm_tpu': 3},
}
CUSTOM_CALL = {'cuda': '__gpu$xla.gpu.triton', 'tpu': 'tpu_custom_call'}
PRESET = {'cuda': 'gpu', 'tpu': 'tpu'}


def lowered_kernels(platform, tokens, d_model, d_ff, experts, top_k,
                    dtype=jnp.bfloat16):
  """Kernel name -> launches in the lowered forward+backward."""
  b = dataclasses.replace(
      backend._PRESETS[PRESET[platform]],  # pylint: disable=protected-access
      matmul_precision=jax.config.jax_default_matmul_precision)

  def loss(*args):
    return jnp.sum(moe_ffn.moe_ffn(*args, backend=b).astype(jnp.float32))

  args = (jax.ShapeDtypeStruct((tokens, d_model), dtype),
          jax.ShapeDtypeStruct((tokens, top_k), jnp.int32),
          jax.ShapeDtypeStruct((tokens, top_k), dtype),
          jax.ShapeDtypeStruct((experts, d_model, d_ff), dtype),
          jax.ShapeDtypeStruct((experts, d_model, d_ff), dtype),
          jax.ShapeDtypeStruct((experts, d_ff, d_model), dtype))
  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 2, 3, 4, 5)))
  exported = export.export(
      grad, platforms=[platform],
      disabled_checks=[export.DisabledSafetyCheck.custom_call(
          CUSTOM_CALL[platform])])(*args)
  text = exported.mlir_module()
  calls = re.findall(r'custom_call @(\S+)\(', text)
  assert set(calls) == {CUSTOM_CALL[platform]}, set(calls)
  # Triton calls carry `name`, Mosaic ones `kernel_name`.
  names = re.findall(r'\b(?:kernel_)?name = "(moe_\w+)"', text)
  assert len(names) == len(calls)
  return collections.Counter(names)


# The benchmark grid's extremes (issue 6) and a shape with no large
# power-of-two factors, which Triton and Mosaic tile differently.
@pytest.mark.parametrize('platform', ['cuda', 'tpu'])
@pytest.mark.parametrize('shape', [(4096, 2048, 1024, 8, 2),
                                   (16384, 2048, 4096, 64, 8),
                                   (100, 256, 512, 60, 3)])
def test_kernels_lower(platform, shape):
  assert lowered_kernels(platform, *shape) == KERNELS[platform]


@pytest.mark.parametrize('platform', ['cuda', 'tpu'])
def test_f32_at_highest_precision_lowers(platform):
  # What the device tests (tests/kernels/test_device.py) run in f32.
  with jax.default_matmul_precision('highest'):
    counts = lowered_kernels(platform, 256, 256, 512, 8, 2, jnp.float32)
  assert counts == KERNELS[platform]


def test_mosaic_takes_whole_dims_that_have_no_lane_multiple():
  assert lowered_kernels('tpu', 100, 96, 200, 8, 2) == KERNELS['tpu']


def test_triton_rejects_dims_without_a_power_of_two_tile():
  with pytest.raises(ConfigError, match=r'output dim=200 needs a power-of-two'):
    lowered_kernels('cuda', 100, 96, 200, 8, 2)


def test_matmul_precision_follows_jax_default():
  assert backend.resolve('interpret').precision is None
  with jax.default_matmul_precision('float32'):
    assert backend.resolve('interpret').precision == jax.lax.Precision.HIGHEST
  with pytest.raises(ConfigError, match="matmul_precision='f64'"):
    backend.resolve('interpret', matmul_precision='f64')


@pytest.mark.parametrize('name,tile_m,match', [
    ('tpu', 100, 'multiple of 8'), ('gpu', 96, 'power of two')])
def test_bad_row_tile_is_a_config_error(name, tile_m, match):
  with pytest.raises(ConfigError, match=match):
    backend.Backend(name, False, 'mosaic' if name == 'tpu' else 'triton',
                    tile_m=tile_m, tile_n=128, tile_k=128, tile_t=32,
                    tile_d=128, min_tile=16 if name == 'gpu' else 1)


def test_pipeline_stages_are_cut_to_fit_shared_memory(monkeypatch):
  gpu = backend._PRESETS['gpu']  # pylint: disable=protected-access
  monkeypatch.setattr(backend, '_smem_per_block', lambda: 227 * 1024)
  # bf16 weight gradient at the GPU tiles: two 128x128 tiles, 64 KiB a stage.
  assert backend.compiler_params(gpu, 128 * 256 * 2).num_stages == 3
  # f32: 128 KiB a stage; three asked an H100 for 256 KiB and did not launch.
  assert backend.compiler_params(gpu, 128 * 256 * 4).num_stages == 1
  assert backend.compiler_params(gpu).num_stages == gpu.num_stages


def test_flash_attention_lowers_for_cuda():
  """model.attention='pallas' at a training step's shape (L 1024, GQA 8:2,
  bf16): its forward and both backward kernels are Triton calls."""
  def loss(q, k, v, seg):
    return jnp.sum(attention_gpu.flash(q, k, v, seg, interpret=False).astype(jnp.float32))
  args = (jax.ShapeDtypeStruct((2, 1024, 8, 128), jnp.bfloat16),
          jax.ShapeDtypeStruct((2, 1024, 2, 128), jnp.bfloat16),
          jax.ShapeDtypeStruct((2, 1024, 2, 128), jnp.bfloat16),
          jax.ShapeDtypeStruct((2, 1024), jnp.int32))
  exported = export.export(
      jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))), platforms=['cuda'],
      disabled_checks=[export.DisabledSafetyCheck.custom_call(CUSTOM_CALL['cuda'])])(*args)
  text = exported.mlir_module()
  assert set(re.findall(r'custom_call @(\S+)\(', text)) == {CUSTOM_CALL['cuda']}
  assert sorted(re.findall(r'name = "(mha[^"]*)"', text)) == [
      'mha_backward', 'mha_forward', 'mha_preprocess_backward']
