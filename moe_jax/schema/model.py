"""The `model` and `moe` config groups, and the frozen model config they make.

Model code never reads a ConfigDict: models/config.py's `from_config` copies
the two groups into these hashable dataclasses (so a Linen module can hold
them), resolves the "0 means default" keys, and checks what the model can
build. A bound of one key is its field's; the rules between keys, and the
choices a registry of models/ owns (moe.router, moe.dispatch), are checked
there.
"""
import dataclasses

from moe_jax.schema.field import field

SCORES = ('softmax', 'sigmoid')
ORDERS = ('softmax_then_topk', 'topk_then_softmax')
BALANCE_SCOPES = ('global', 'sequence')
ROUTER_LOSS_REDUCTIONS = ('sum', 'mean')
ATTENTIONS = ('auto', 'reference', 'blocked', 'pallas', 'cudnn')
DTYPES = ('float32', 'bfloat16', 'float16')
ROPE_SCALINGS = ('none', 'llama3')
NORM_POSITIONS = ('pre', 'post')
CROSS_ENTROPIES = ('reference', 'fused')   # models/losses.py
REMATS = ('none', 'full', 'save_dots', 'save_dots_no_batch', 'save_moe')  # models/remat.py


@dataclasses.dataclass(frozen=True)
class MoEConfig:
  """The `moe` group; `d_ff` and `router_init_std` are already resolved.

  These defaults are the config's (configs/common.py builds the group from
  them); num_experts=0 makes every layer dense (and from_config leaves the
  keys past num_experts unchecked, as they are unused).
  """
  num_experts: int = field(0, at_least=0, shape=True)
  top_k: int = field(2, at_least=1)   # and at most num_experts
  d_ff: int = field(0, at_least=0, shape=True)   # per-expert width; 0: same as model.d_ff
  num_shared_experts: int = field(0, at_least=0, shape=True)
  # sigmoid(x . w) times the shared experts' output, w [D, 1] (Qwen2-MoE's
  # shared_expert_gate); needs num_shared_experts > 0 (88efa30: none before).
  shared_gate: bool = field(False, added=False, shape=True)
  # Layer pattern: layer i is MoE iff i >= first_dense and
  # (i - first_dense) % every == every - 1. every=1: all MoE; every=2: Llama-4 style.
  every: int = field(1, at_least=1, shape=True)
  first_dense: int = field(0, at_least=0, shape=True)
  # a router of moe_jax/models/routers/: learned | hash
  router: str = field('learned', shape=True)
  # hash router: table = f(vocab_size, num_experts, hash_seed)
  hash_seed: int = field(0, at_least=0)
  score: str = field('softmax', choices=SCORES)
  order: str = field('softmax_then_topk', choices=ORDERS)
  renormalize: bool = True       # renormalise the selected top-k gates to sum to 1
  # 0: sqrt(2 / (5 d_model)), seed 002 appendix A.6
  router_init_std: float = field(0.0, at_least=0.0)
  # multiplicative input jitter while training
  jitter: float = field(0.0, at_least=0, below=1)
  use_bias: bool = field(False, shape=True)   # selection-only bias, aux-loss-free balancing
  bias_update_rate: float = field(1e-3, at_least=0.0)
  balance_loss_weight: float = field(0.01, at_least=0.0)
  balance_scope: str = field('global', choices=BALANCE_SCOPES)
  z_loss_weight: float = field(1e-3, at_least=0.0)
  # sum | mean of the router losses over MoE layers (21b6cc9)
  router_loss_reduction: str = field('sum', choices=ROUTER_LOSS_REDUCTIONS, added='sum')
  # auto (per platform) | reference | einsum | ragged | grouped | pallas |
  # pallas_mosaic_gpu (models/dispatch.py)
  dispatch: str = 'auto'
  capacity_factor: float = field(1.25, above=0.0)   # einsum dispatch only


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The `model` group plus its `moe` group. These defaults are the config's
  (configs/common.py builds the group from them): a CPU-sized Llama-style
  decoder, the `tiny` preset."""
  # 0: take the tokenizer's vocabulary size
  vocab_size: int = field(0, at_least=0, shape=True)
  d_model: int = field(64, at_least=1, shape=True)
  num_layers: int = field(2, at_least=1, shape=True)
  num_heads: int = field(4, at_least=1, shape=True)
  num_kv_heads: int = field(2, at_least=1, shape=True)
  head_dim: int = field(16, at_least=1, shape=True)
  d_ff: int = field(256, at_least=1, shape=True)   # dense MLP width
  rope_theta: float = field(10_000.0, above=0.0)
  # Llama 3's long-context RoPE rule (moe_jax/models/rope.py); 'none' leaves
  # the frequencies alone and the four keys below unused. 81ac58c added them
  # and qk_norm, qkv_bias, max_position_embeddings.
  rope_scaling: str = field('none', choices=ROPE_SCALINGS, added='none')
  rope_factor: float = field(8.0, added=8.0)
  rope_low_freq_factor: float = field(1.0, added=1.0)
  rope_high_freq_factor: float = field(4.0, added=4.0)
  rope_original_max_len: int = field(8192, added=8192)
  # the context the model is meant for; only exported (0: seq_len)
  max_position_embeddings: int = field(0, at_least=0, added=0)
  norm_eps: float = field(1e-6, above=0.0)
  # RMSNorm over each head's q and k before RoPE (Qwen3)
  qk_norm: bool = field(False, added=False, shape=True)
  # biases on the q, k, v projections (Qwen2)
  qkv_bias: bool = field(False, added=False, shape=True)
  # pre: x + F(norm(x)) | post: norm(x + F(x)) (seed 003 App. C; b4599c7)
  norm_position: str = field('pre', choices=NORM_POSITIONS, added='pre', shape=True)
  tie_embeddings: bool = field(False, shape=True)
  dtype: str = field('float32', choices=DTYPES)   # compute dtype; params stay float32
  init_std: float = field(0.02, above=0.0)
  # auto (per platform) | reference | blocked (kernels/attention_cpu.py) | pallas (attention_gpu.py)
  # | cudnn (attention_cudnn.py). 9b88ab5: runs before it ran whole-array attention.
  attention: str = field('auto', choices=ATTENTIONS, added='reference', numerics=True)
  # Memory (models/remat.py; docs/benchmarks.md, "Memory"): what each block
  # keeps for the backward pass, and tokens per chunk of the LM head + loss in
  # training (0: one [B, L, V]). edc4fca: no remat, no chunks before it.
  remat: str = field('none', choices=REMATS, added='none', numerics=True)
  loss_chunk: int = field(0, at_least=0, added=0, numerics=True)
  # reference | fused: the per-token loss without float32 [tokens, V] passes
  # (models/losses.py); opt-in until a GPU has timed it against the reference (ce36b46).
  cross_entropy: str = field('reference', choices=CROSS_ENTROPIES, added='reference',
                              numerics=True)
  # The block stack as scans over its periods (models/scan.py): less compile
  # time per layer (docs/benchmarks.md, "Memory"); same params tree, same function (65811f0).
  scan_layers: bool = field(False, added=False, numerics=True)
  moe: MoEConfig = MoEConfig()

  def is_moe_layer(self, i):
    """Layer i is MoE iff i >= first_dense and (i - first_dense) % every == every - 1.

    every=1 gives an all-MoE stack, every=2 the interleaved stacks of seed 000
    Table 6(a), first_dense=2 the stacks of Table 7(a) (MoE L = layers - 2).
    """
    m = self.moe
    return (m.num_experts > 0 and i >= m.first_dense and
            (i - m.first_dense) % m.every == m.every - 1)

  @property
  def moe_layers(self):
    return tuple(i for i in range(self.num_layers) if self.is_moe_layer(i))
