"""Causal attention over packed rows through cuDNN's flash attention.

  out = jax.nn.dot_product_attention(q, k, v, mask=same segment, is_causal=True,
                                     implementation='cudnn')

The path MaxText takes on GPU. cuDNN runs the causal part as its own mask
type (it skips the tiles above the diagonal) and takes GQA's G kv heads as
they are. The same-segment part of the model's mask (packed documents,
kernels/attention_cpu.py `allowed`) has no cuDNN mask type through this API,
so jax hands it to cuDNN as an additive [B, 1, L, L] bias in the compute
dtype; cuDNN's backward also writes that bias' gradient, which nothing
reads. Both are [B, L, L] per layer, a sixteenth of the reference's float32
[B, H, L, L] scores at 8 heads, and whether they cost much is for a GPU run
to show (docs/benchmarks.md, the GPU script).

What cuDNN cannot take is a ConfigError: float32 (it runs bf16 and fp16
only), a head dim that is not a multiple of 8 or above 128 (256 on Hopper),
an odd sequence length with a bias in training. Off a GPU the very same call
runs with implementation='xla', jax's whole-array twin: what the CPU tests
and the GPU script's dry run compare against the reference.
"""
import jax
import jax.numpy as jnp

from moe_jax.errors import ConfigError

DTYPES = ('bfloat16', 'float16')
HEAD_DIM_MULTIPLE = 8


def max_head_dim(compute_capability=None):
  """cuDNN flash attention's widest head: 256 from Hopper (9.0) on, else 128."""
  major = int(str(compute_capability or '0').split('.')[0])
  return 256 if major >= 9 else 128


def check(dtype, head_dim, max_head=256):
  """The ConfigError for what cuDNN cannot run, checked with the config
  (max_head: the most any GPU takes; `attention` checks the device's own)."""
  if str(dtype) not in DTYPES:
    raise ConfigError(f"model.attention='cudnn' needs model.dtype in {DTYPES} (cuDNN flash "
                      f"attention), got {dtype}; use model.attention='reference'")
  if head_dim % HEAD_DIM_MULTIPLE or head_dim > max_head:
    raise ConfigError(f"model.attention='cudnn' needs model.head_dim a multiple of "
                      f'{HEAD_DIM_MULTIPLE} and <= {max_head}, got {head_dim}')


def implementation():
  """'cudnn' on a GPU; elsewhere jax's 'xla' twin of the same call."""
  return 'cudnn' if jax.default_backend() == 'gpu' else 'xla'


def attention(q_BLHK, k_BLGK, v_BLGK, segment_ids_BL, impl=None):
  """softmax(mask(q k^T / sqrt(K))) v over one full pass, [B, L, H, K]; a
  query sees earlier or equal slots of its row with its segment id."""
  impl = impl or implementation()
  length, k = q_BLHK.shape[1], q_BLHK.shape[3]
  if impl == 'cudnn':
    check(q_BLHK.dtype.name, k, max_head_dim(getattr(jax.devices()[0], 'compute_capability', None)))
    if length % 2:
      raise ConfigError(f"model.attention='cudnn' needs an even seq_len (cuDNN's bias in "
                        f'training), got {length}')
  same_B1LL = (segment_ids_BL[:, :, None] == segment_ids_BL[:, None, :])[:, None]
  return jax.nn.dot_product_attention(q_BLHK, k_BLGK, v_BLGK, mask=same_B1LL, is_causal=True,
                                      scale=k**-0.5, implementation=impl)
