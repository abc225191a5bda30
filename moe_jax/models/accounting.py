"""Parameter and FLOP accounting from a ModelConfig, without building params.

Definitions follow the seed papers:
  * non-embedding parameters (seed 002 eqs. 4-6): attention, MLP / experts,
    router and norms; N1 (dense), N2 (active: top-k experts per token) and
    N_total. With H*K = d_model, d_ff = 4 d_model and SwiGLU these are
    (4 + 12) L d^2, (4 + 12 k) L d^2, (4 + 12 E) L d^2 plus O(L d) terms.
  * embedding parameters: the input embedding plus a separate LM head
    (seed 000 Table 6(b) "Embed" = 2 V d with untied embeddings).
  * forward FLOPs per token: 2 * active non-embedding params plus attention
    2 * layers * context * (H*K) (Kaplan et al.); seed 000 Table 6(b) trains for
    tokens * 3 * this ("Total Train FLOPs").
The per-layer numbers mirror the columns of seed 000 Tables 6(b) and 7(b).
"""
import dataclasses

from moe_jax.models import routers


@dataclasses.dataclass(frozen=True)
class Counts:
  router: int             # one MoE layer's router (incl. bias)
  dense_layer: int        # attention + dense MLP (+ norms)
  moe_active_layer: int   # attention + k experts + shared + router (+ norms)
  moe_total_layer: int    # attention + E experts + shared + router (+ norms)
  embedding: int          # embedding (+ LM head when untied)
  active_nonembed: int    # N2 (N1 for a dense model), seed 002 eq. 5 / 4
  total_nonembed: int     # N_total, seed 002 eq. 6

  @property
  def active(self):
    return self.active_nonembed + self.embedding

  @property
  def total(self):
    return self.total_nonembed + self.embedding


def counts(cfg):
  d, m = cfg.d_model, cfg.moe
  attn = d * cfg.num_heads * cfg.head_dim * 2 + d * cfg.num_kv_heads * cfg.head_dim * 2
  if cfg.qkv_bias:
    attn += (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
  if cfg.qk_norm:
    attn += 2 * cfg.head_dim
  norms = 2 * d
  dense_layer = attn + 3 * d * cfg.d_ff + norms
  router = routers.get(m.router).num_params(d, m)
  shared = 3 * d * m.d_ff * m.num_shared_experts + (d if m.shared_gate else 0)
  expert = 3 * d * m.d_ff
  moe_active = attn + m.top_k * expert + shared + router + norms
  moe_total = attn + m.num_experts * expert + shared + router + norms
  num_moe = len(cfg.moe_layers)
  num_dense = cfg.num_layers - num_moe
  embedding = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
  return Counts(
      router=router if num_moe else 0,
      dense_layer=dense_layer,
      moe_active_layer=moe_active,
      moe_total_layer=moe_total,
      embedding=embedding,
      active_nonembed=num_dense * dense_layer + num_moe * moe_active + d,
      total_nonembed=num_dense * dense_layer + num_moe * moe_total + d,
  )


def forward_flops_per_token(cfg, context):
  """2 N_active + 2 L context (H K): non-embedding forward FLOPs per token."""
  attention = 2 * cfg.num_layers * context * cfg.num_heads * cfg.head_dim
  return 2 * counts(cfg).active_nonembed + attention


def train_flops(cfg, context, tokens):
  """Forward + backward = 3 x forward (seed 000 Table 6(b), seed 002's 6ND)."""
  return 3 * forward_flops_per_token(cfg, context) * tokens
