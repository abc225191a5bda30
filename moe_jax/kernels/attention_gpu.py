"""Causal attention over packed rows as a flash kernel: the GPU path.

The reference (kernels/attention_cpu.py) materialises every [B, G, Q, S]
float32 score and runs softmax and its backward as whole-array passes. In the
`10layer` training step (16 x 1024 tokens, H200) that came to 28 of the
step's 95.6 ms, second only to the 200k-vocabulary head and loss
(docs/benchmarks.md, "Where the GPU step's time goes"). A flash kernel keeps
each tile's scores on chip and recomputes them in the backward pass.

The kernel is jax's own Triton flash attention
(`jax.experimental.pallas.ops.gpu.attention.mha`, forward and backward).
Its mask is "same segment id" and, with causal=True, "key slot <= query
slot", which is `attention_cpu.allowed` for a full pass (queries in slots
0 ... L - 1); a KV-cache decode is not a full pass and keeps the reference.
It wants as many kv heads as query heads: each of the G kv heads is repeated
for its R = H / G query heads, and the transpose of that repeat sums their
gradients back. Triton's dots want every dimension >= 16, so the sequence
length needs blocks of 16 and, compiled, the head dim is at least 16.
Elsewhere than on a GPU it runs in Pallas interpret mode
(exact, slow): the equivalence tests.
"""
import math

import jax
import jax.numpy as jnp

_BLOCK = 128   # the kernel's default query / key block
_MIN_BLOCK = 16   # Triton's smallest matmul tile, each dimension


def block_size(length):
  """The largest power-of-two block <= 128 that divides `length` (mha needs
  L to be a multiple of its blocks)."""
  block = math.gcd(length, _BLOCK)
  if block < _MIN_BLOCK:
    raise ValueError(f"model.attention='pallas' needs seq_len divisible by {_MIN_BLOCK}, "
                     f'got {length}')
  return block


def flash(q_BLHK, k_BLGK, v_BLGK, segment_ids_BL, interpret=None):
  """softmax(mask(q k^T / sqrt(K))) v over one full pass, [B, L, H, K]."""
  length, h, k = q_BLHK.shape[1:]
  r = h // k_BLGK.shape[2]
  block = block_size(length)
  # Imported here: Triton's dialect takes ~0.2 s to import, paid at every
  # start of every command, and only this path uses it.
  from jax.experimental.pallas.ops.gpu import attention as pallas_attention  # pylint: disable=g-import-not-at-top
  blocks = pallas_attention.BlockSizes(
      block_q=block, block_k=block, block_q_dkv=min(block, 32), block_kv_dkv=min(block, 32),
      block_q_dq=min(block, 32), block_kv_dq=min(block, 32))
  if interpret is None:
    interpret = jax.default_backend() != 'gpu'
  if k < _MIN_BLOCK and not interpret:   # the head dim is a dot's contraction and output width
    raise ValueError(f"model.attention='pallas' needs head_dim >= {_MIN_BLOCK} on a GPU, got {k}")
  return pallas_attention.mha(
      q_BLHK, jnp.repeat(k_BLGK, r, axis=2), jnp.repeat(v_BLGK, r, axis=2), segment_ids_BL,
      sm_scale=k**-0.5, causal=True, block_sizes=blocks, interpret=interpret)
