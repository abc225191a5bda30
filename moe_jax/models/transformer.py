"""Llama-family decoder LM with dense, MoE or interleaved layer stacks.

    logits_BLV, aux = Transformer(cfg).apply({'params': p}, tokens_BL,
                                             segment_ids=seg_BL, positions=pos_BL)

Blocks of GQA+RoPE and SwiGLU or MoE sublayers, each with an RMSNorm: pre-norm
by default (x + F(norm(x)), Llama), or post-norm with `norm_position='post'`
(norm(x + F(x)), the original Transformer and BERT; seed 003 App. C eqs. 5-6).
Then a final norm (kept post-norm too, where it only rescales, so both
positions have one params tree) and a tied or separate LM head. Which layers are MoE
is `cfg.is_moe_layer(i)`: all dense, all MoE, every n-th, or after the first
k dense (the stacks of seed 000 Tables 6 and 7). `aux` holds the auxiliary
loss (summed or averaged over MoE layers: moe.router_loss_reduction) and each
MoE layer's router statistics (docs/internals.md).
`model.scan_layers` runs the blocks as scans over the stack's periods
(moe_jax/models/scan.py) with the same params tree.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from moe_jax.models import attention
from moe_jax.models import layers
from moe_jax.models import mlp
from moe_jax.models import moe as moe_lib
from moe_jax.models import router as router_lib
from moe_jax.models import scan

_ACT = ('batch', 'length', 'embed')


class Block(nn.Module):
  cfg: 'moe_jax.schema.model.ModelConfig'
  is_moe: bool

  @nn.compact
  def __call__(self, x_BLD, tokens_BL, segment_ids_BL, positions_BL, train, decode,
               load_E=None):
    cfg = self.cfg
    dtype = layers.compute_dtype(cfg)
    pre = cfg.norm_position == 'pre'
    attn_norm = layers.RMSNorm(cfg.norm_eps, dtype, name='attn_norm')
    y_BLD = attention.Attention(cfg, name='attn')(attn_norm(x_BLD) if pre else x_BLD,
                                                  segment_ids_BL, positions_BL, decode)
    x_BLD = x_BLD + y_BLD if pre else attn_norm(x_BLD + y_BLD)
    x_BLD = nn.with_logical_constraint(x_BLD, _ACT)
    mlp_norm = layers.RMSNorm(cfg.norm_eps, dtype, name='mlp_norm')
    h_BLD = mlp_norm(x_BLD) if pre else x_BLD
    if self.is_moe:
      y_BLD, stats = moe_lib.MoE(cfg, name='moe')(h_BLD, tokens_BL, segment_ids_BL != 0, train,
                                                load_E)
    else:
      y_BLD, stats = mlp.MLP(cfg.d_ff, cfg.init_std, dtype, name='mlp')(h_BLD), None
    return (x_BLD + y_BLD if pre else mlp_norm(x_BLD + y_BLD)), stats


class Transformer(nn.Module):
  cfg: 'moe_jax.schema.model.ModelConfig'

  @nn.compact
  def __call__(self, tokens_BL, segment_ids=None, positions=None, train=False, decode=False,
               hidden=False, expert_load=None):
    """Logits [B, L, V] (float32) and aux. segment_ids=None: one document, no padding.

    decode=True reads and extends the attention KV cache (the `cache`
    collection, mutable; moe_jax/models/attention.py). hidden=True returns
    the final-norm output [B, L, D] instead of logits, for a loss that applies
    the LM head chunk by chunk (`head_weight`, models/losses.py).
    `expert_load` ({'layers_i': [E]}) replaces the batch's own expert load
    fractions in the global balance loss: gradient accumulation passes the
    whole batch's (train/step.py).
    """
    cfg = self.cfg
    dtype = layers.compute_dtype(cfg)
    batch, length = tokens_BL.shape
    if segment_ids is None:
      segment_ids = jnp.ones((batch, length), jnp.int32)
    elif positions is None:
      # Row positions would give every packed document after the first a wrong RoPE.
      raise ValueError('Transformer: segment_ids given without positions (packed rows need both)')
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))

    embed = layers.Embed(cfg.vocab_size, cfg.d_model, cfg.init_std, dtype, name='embed')
    x_BLD = nn.with_logical_constraint(embed(tokens_BL), _ACT)
    # The scanned stack and remat apply blocks as functions of made params,
    # with no per-layer collection (models/scan.py).
    functional = cfg.scan_layers or cfg.remat != 'none'
    if functional and not (decode or self.is_initializing()
                           or self.is_mutable_collection('intermediates')):
      rng = self.make_rng('jitter') if train and cfg.moe.jitter > 0 and cfg.moe_layers else None
      x_BLD, layer_stats = (scan.run if cfg.scan_layers else scan.loop)(
          Block, cfg, self.variables['params'], x_BLD, tokens_BL, segment_ids, positions, train,
          expert_load, rng)
    else:
      layer_stats = {}
      for i in range(cfg.num_layers):
        load_E = (expert_load or {}).get(f'layers_{i}')
        x_BLD, stats = Block(cfg, cfg.is_moe_layer(i), name=f'layers_{i}')(
            x_BLD, tokens_BL, segment_ids, positions, train, decode, load_E)
        if stats is not None:
          layer_stats[f'layers_{i}'] = stats
    aux = {'moe': {f'layers_{i}': layer_stats[f'layers_{i}'] for i in cfg.moe_layers}}
    aux['aux_loss'] = router_lib.router_loss(aux['moe'], cfg.moe.balance_loss_weight,
                                             cfg.moe.z_loss_weight, cfg.moe.router_loss_reduction)
    x_BLD = layers.RMSNorm(cfg.norm_eps, dtype, name='final_norm')(x_BLD)
    # The head's param exists whichever output is asked for.
    w_DV = None if cfg.tie_embeddings else self.param(
        'lm_head', layers.normal(cfg.init_std), (cfg.d_model, cfg.vocab_size), jnp.float32)
    if hidden:
      return x_BLD, aux
    if w_DV is None:
      logits_BLV = embed.attend(x_BLD)
    else:
      logits_BLV = layers.dense(x_BLD, w_DV.astype(dtype))
    logits_BLV = nn.with_logical_constraint(logits_BLV, ('batch', 'length', 'vocab'))
    return logits_BLV.astype(jnp.float32), aux


def head_weight(params, cfg):
  """The LM head [D, V] in the compute dtype: the tied embedding or `lm_head`,
  exactly as `Transformer` applies it."""
  dtype = layers.compute_dtype(cfg)
  if cfg.tie_embeddings:
    return params['embed']['embedding'].astype(dtype).T
  return params['lm_head'].astype(dtype)


def abstract_params(model, seq_len):
  """The params tree as ShapeDtypeStructs: jax.eval_shape allocates nothing,
  so this works for any model size."""
  tokens = jnp.zeros((1, seq_len), jnp.int32)
  return jax.eval_shape(lambda: model.init(jax.random.key(0), tokens)['params'])
