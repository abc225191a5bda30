"""Grouped-query attention with RoPE, a packed-sequence mask and a KV cache.

Params: q [D, H, K], k and v [D, G, K], o [H, K, D] (G kv heads shared by
H / G query heads each); with `model.qkv_bias` also q_bias [H, K] and
k_bias, v_bias [G, K] (Qwen2); with `model.qk_norm` q_norm/scale and
k_norm/scale [K], an RMSNorm over each head's q and k before RoPE (Qwen3).
Each is a reshape (and transpose) of one transformers tensor: q_proj.weight
[H*K, D] is q.reshape(D, H*K).T (moe_jax/interop/layout.py).

RoPE rotates by `positions`, which restart at 0 in every packed document; the
mask lets a query see earlier slots of its row with the same segment id, so
documents never attend to each other.

`decode=True` keeps keys and values in the `cache` collection: the first call
(inside `init`) sizes it by its input, [B, S], then each call writes its L
slots after the ones already filled and attends over all S. A prompt and then
one token at a time is how moe_jax/eval/generation.py decodes.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from moe_jax.errors import ConfigError
from moe_jax.kernels import attention_cpu
from moe_jax.kernels import attention_cudnn
from moe_jax.kernels import attention_gpu
from moe_jax.models import layers
from moe_jax.models import rope


# The attention path per platform ('auto'), as `dispatch.AUTO` for the MoE
# layer. On CPU the blocked loop of kernels/attention_cpu.py, since its mask
# became an additive bias built outside the loop: the quickstart's training
# steps (dense, E = 4, 8) take 0.91-0.95x the reference's CPU time with it,
# and 0.71-0.73x at d_model 256 / seq_len 512 (docs/benchmarks.md, "CPU step,
# round 2"). Only on one device: the loop indexes the batch, so on a mesh
# that splits it XLA would gather the whole batch to every device. On GPU the
# flash kernel ('pallas', kernels/attention_gpu.py) stays opt-in until it is
# timed against the reference in one run (docs/benchmarks.md, "Where the GPU
# step's time goes").
AUTO = {'cpu': 'blocked'}
AUTO_DEFAULT = 'reference'


def resolve(name, platform=None, mesh=None):
  """The concrete path `name` runs: itself, or for 'auto' the platform's
  (the reference on a `mesh` of more than one device)."""
  multi_device = mesh is not None and mesh.size > 1
  if name == 'pallas' and (multi_device or (platform or jax.default_backend()) == 'tpu'):
    # A Triton kernel: XLA cannot split it over a mesh, and TPUs do not run it.
    raise ConfigError("model.attention='pallas' runs on one GPU (or in interpret mode on "
                      'CPU); use model.attention=reference on a mesh or a TPU')
  if name == 'cudnn' and (platform or jax.default_backend()) == 'tpu':
    raise ConfigError("model.attention='cudnn' runs on a GPU (or as its XLA twin on CPU); "
                      'use model.attention=reference on a TPU')
  if name != 'auto':
    return name
  if multi_device:
    return AUTO_DEFAULT
  return AUTO.get(platform or jax.default_backend(), AUTO_DEFAULT)


class Attention(nn.Module):
  cfg: 'moe_jax.schema.model.ModelConfig'

  @nn.compact
  def __call__(self, x_BLD, segment_ids_BL, positions_BL, decode=False):
    cfg = self.cfg
    dtype = layers.compute_dtype(cfg)
    d = x_BLD.shape[-1]
    h, g, k = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim

    def param(name, shape, init=layers.normal(cfg.init_std)):
      return self.param(name, init, shape, jnp.float32).astype(dtype)

    w_q, w_k, w_v = param('q', (d, h, k)), param('k', (d, g, k)), param('v', (d, g, k))
    w_o = param('o', (h, k, d))
    q_BLHK = layers.dense(x_BLD, w_q)
    k_BLGK = layers.dense(x_BLD, w_k)
    v_BLGK = layers.dense(x_BLD, w_v)
    if cfg.qkv_bias:
      zeros = nn.initializers.zeros
      q_BLHK = q_BLHK + param('q_bias', (h, k), zeros)
      k_BLGK = k_BLGK + param('k_bias', (g, k), zeros)
      v_BLGK = v_BLGK + param('v_bias', (g, k), zeros)
    if cfg.qk_norm:
      q_BLHK = layers.RMSNorm(cfg.norm_eps, dtype, name='q_norm')(q_BLHK)
      k_BLGK = layers.RMSNorm(cfg.norm_eps, dtype, name='k_norm')(k_BLGK)
    b, length = x_BLD.shape[:2]
    # A full pass (no KV cache) holds positions below its length L; on CPU RoPE
    # then reads its sines and cosines from a table (rope.sin_cos says why).
    bound = length if jax.default_backend() == 'cpu' and not decode else None
    sin_cos = rope.sin_cos(positions_BL, rope.frequencies(cfg), bound)
    q_BLHK, k_BLGK = rope.rotate(q_BLHK, *sin_cos), rope.rotate(k_BLGK, *sin_cos)
    q_BLHK = nn.with_logical_constraint(q_BLHK, ('batch', 'length', 'heads', 'head_dim'))
    path = resolve(cfg.attention, mesh=jax.sharding.get_abstract_mesh())
    # A KV-cache decode is no full pass, and `init` (often on a few dummy
    # tokens) only shapes the parameters: both take the reference.
    if path in ('pallas', 'cudnn') and not (decode or self.is_initializing()):
      kernel = attention_gpu.flash if path == 'pallas' else attention_cudnn.attention
      out_BLHK = kernel(q_BLHK, k_BLGK, v_BLGK, segment_ids_BL)
      return layers.dense(out_BLHK, w_o, in_dims=2)

    q_slots_L = jnp.arange(length)
    kv_segment_ids_BS = segment_ids_BL
    if decode:
      k_BLGK, v_BLGK, kv_segment_ids_BS, q_slots_L = self._cached(k_BLGK, v_BLGK, segment_ids_BL)

    # Query head h reads kv head h // (H / G): the R = H / G query heads of a
    # group and their L positions form the rows Q = R*L of one matmul against
    # the group's S keys. Heads go first, so the scores come out in the layout
    # softmax reads; XLA:CPU spends ~25% more on the [B, L, G, R, K] einsums
    # (transposed copies of the scores, docs/benchmarks.md).
    r = h // g
    q_BGQK = q_BLHK.reshape(b, length, g, r, k).transpose(0, 2, 3, 1, 4).reshape(
        b, g, r * length, k)
    k_BGSK, v_BGSK = k_BLGK.transpose(0, 2, 1, 3), v_BLGK.transpose(0, 2, 1, 3)
    # Scores accumulate in float32 even with bf16 inputs.
    args = (q_BGQK, k_BGSK, v_BGSK, segment_ids_BL, kv_segment_ids_BS, q_slots_L)
    if path == 'blocked':
      # Without a cache the queries sit in slots 0 ... L - 1, so query blocks
      # may skip the keys after them.
      block = 0 if decode else attention_cpu.query_block(length)
      out_BGQK = attention_cpu.blocked(*args, query_block=block)
    else:
      out_BGQK = attention_cpu.reference(*args)
    out_BLHK = out_BGQK.reshape(b, g, r, length, k).transpose(0, 3, 1, 2, 4).reshape(
        b, length, h, k)
    return layers.dense(out_BLHK, w_o, in_dims=2)

  def _cached(self, k_BLGK, v_BLGK, segment_ids_BL):
    """Writes this call's keys, values and segment ids into the cache; returns
    the whole cache [B, S, ...] and the slots the L queries occupy."""
    length = k_BLGK.shape[1]
    ready = self.has_variable('cache', 'k')
    k_c = self.variable('cache', 'k', jnp.zeros, k_BLGK.shape, k_BLGK.dtype)
    v_c = self.variable('cache', 'v', jnp.zeros, v_BLGK.shape, v_BLGK.dtype)
    seg_c = self.variable('cache', 'segment_ids', jnp.zeros, segment_ids_BL.shape, jnp.int32)
    index = self.variable('cache', 'index', lambda: jnp.zeros((), jnp.int32))
    if not ready:  # init: the cache takes the input's shape, nothing is stored yet
      return k_BLGK, v_BLGK, segment_ids_BL, jnp.arange(length)
    i = index.value
    write = lambda cache, new, *rest: jax.lax.dynamic_update_slice(
        cache.value, new.astype(cache.value.dtype), (0, i, *rest))
    k_c.value, v_c.value = write(k_c, k_BLGK, 0, 0), write(v_c, v_BLGK, 0, 0)
    seg_c.value = write(seg_c, segment_ids_BL)
    index.value = i + length
    return k_c.value, v_c.value, seg_c.value, i + jnp.arange(length)
