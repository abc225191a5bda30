"""Named model presets: `tiny` and the architectures of the seed papers.

`apply(config, name)` writes a preset into a ConfigDict's `model` and `moe`
groups (configs/common.py:apply_preset calls it). Model-shape keys are always
set; a preset sets `moe` keys only when the paper fixes them, so `tiny` can be
the shape of both a dense and an MoE run.

  tiny                 CPU-sized, the `model` defaults of configs/common.py
  20layer 10layer 8layer
                       seed 000 Table 6(a): interleaved dense/MoE (every 2nd
                       layer MoE), 32 experts, loss-free (bias) balancing
  full_4layer full_6layer full_8layer full_10layer
                       seed 000 Table 7(a): 256 experts, top-8, first 2 layers
                       dense (MoE L = layers - 2)
  dense_15m ... dense_1b
                       seed 002 Table 3 dense models (SwiGLU, d_mlp = 4 d_model,
                       MHA, Llama vocabulary 32,000, init std from Table 5)
  8x15m ... 8x1b       their 8-expert top-2 counterparts (seed 002 eq. 15 and
                       appendix A.3: Softmax(TopK(Wx)), balance weight 1e-3)
"""
from moe_jax.errors import ConfigError

_SEED000_VOCAB = 200_704
_SEED002_VOCAB = 32_000


def _shape(vocab, layers, d, heads, kv_heads, d_ff, head_dim=None, init_std=0.02):
  return dict(vocab_size=vocab, num_layers=layers, d_model=d, num_heads=heads,
              num_kv_heads=kv_heads, head_dim=head_dim or d // heads, d_ff=d_ff,
              init_std=init_std)


def _seed000_interleaved(layers, d, d_ff, heads, groups, expert_ff, top_k):
  model = _shape(_SEED000_VOCAB, layers, d, heads, groups, d_ff)
  moe = dict(num_experts=32, top_k=top_k, d_ff=expert_ff, every=2, first_dense=0,
             num_shared_experts=0, use_bias=True, balance_loss_weight=0.0)
  return model, moe


def _seed000_full(layers, d, d_ff, heads, groups, expert_ff):
  model = _shape(_SEED000_VOCAB, layers, d, heads, groups, d_ff)
  moe = dict(num_experts=256, top_k=8, d_ff=expert_ff, every=1, first_dense=2,
             num_shared_experts=0, use_bias=True, balance_loss_weight=0.0)
  return model, moe


# name: (n_layer, d_model, n_head, init std) from seed 002 Tables 3 and 5.
_SEED002 = {
    '15m': (9, 320, 4, 0.035),
    '44m': (12, 480, 8, 0.029),
    '0.1b': (15, 640, 8, 0.025),
    '0.2b': (21, 832, 8, 0.022),
    '0.5b': (26, 1120, 16, 0.019),
    '1b': (30, 1504, 16, 0.016),
}


def _table():
  table = {'tiny': (dict(vocab_size=0, num_layers=2, d_model=64, num_heads=4, num_kv_heads=2,
                         head_dim=16, d_ff=256, init_std=0.02), {})}
  table['20layer'] = _seed000_interleaved(20, 2048, 7168, 16, 16, 3072, 2)
  table['10layer'] = _seed000_interleaved(10, 1024, 3584, 8, 8, 1536, 2)
  table['8layer'] = _seed000_interleaved(8, 768, 2688, 6, 6, 1152, 1)
  table['full_4layer'] = _seed000_full(4, 256, 896, 2, 2, 384)
  table['full_6layer'] = _seed000_full(6, 256, 896, 2, 2, 384)
  table['full_8layer'] = _seed000_full(8, 384, 1344, 3, 3, 576)
  table['full_10layer'] = _seed000_full(10, 512, 1792, 4, 4, 768)
  for size, (layers, d, heads, std) in _SEED002.items():
    model = _shape(_SEED002_VOCAB, layers, d, heads, heads, 4 * d, init_std=std)
    table[f'dense_{size}'] = (model, dict(num_experts=0))
    table[f'8x{size}'] = (model, dict(
        num_experts=8, top_k=2, d_ff=0, every=1, first_dense=0, num_shared_experts=0,
        order='topk_then_softmax', balance_loss_weight=1e-3))
  return table


PRESETS = _table()


def apply(config, name):
  """Writes preset `name` into `config.model` and `config.moe` (in place)."""
  if name not in PRESETS:
    raise ConfigError(f'model preset {name!r} is not one of {sorted(PRESETS)}')
  model, moe = PRESETS[name]
  config.model.update(model)
  config.moe.update(moe)
  return config
