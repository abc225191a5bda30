"""Named presets: `tiny` and the seed papers' models with their training settings.

`apply(config, name)` writes a preset into a ConfigDict: the `model` group
always; `moe` keys only where the paper fixes them (so `tiny` can be the shape
of both a dense and an MoE run); and, for the paper presets, the training
settings the paper states (`seq_len`, `batch_size`, `total_steps`, `opt.*`).
What a paper leaves open keeps configs/common.py's default, listed per preset
below as "ours".

  tiny                 CPU-sized, the `model` defaults of configs/common.py;
                       no training settings.
  20layer 10layer 8layer
                       seed 000 Table 6(a): interleaved dense/MoE (every 2nd
                       layer MoE), 32 experts, loss-free (bias) balancing and
                       no auxiliary or z-loss (§2: balancing "without
                       modifying the loss"). Training (§5.1, Table 6): context
                       8192, WSD ending in a 10% anneal (decay_fraction 0.1);
                       10layer: T = 100K steps (Table 3a). Ours: learning
                       rate, warmup, anneal target (0), batch size, and the
                       steps of 20layer / 8layer (Table 6(b) gives tokens only).
  full_4layer full_6layer full_8layer full_10layer
                       seed 000 Table 7(a): 256 experts, top-8, first 2 layers
                       dense (MoE L = layers - 2), balancing as above.
                       Training (Table 7(c)): context 8192, batch 16 (32 for
                       full_10layer), steps 16,790 / 17,611 / 29,663 / 22,741,
                       LR 1.69e-2 / 1.16e-2 / 5.95e-3 / 3.75e-3, WSD with a 10%
                       anneal. Ours: warmup, anneal target (0).
  dense_15m ... dense_1b
                       seed 002 Table 3 dense models (SwiGLU, d_mlp = 4 d_model,
                       MHA, Llama vocabulary 32,000, init std from Table 5).
                       Training (Tables 4-5, App. A.5): context 1024, AdamW
                       (0.9, 0.95, 1e-8), weight decay 0.1, clipping 1.0,
                       per-model warmup / steps / batch / LR, WSD with linear
                       decay over the last 10% to 10% of the peak; no z-loss
                       (App. A.2).
  8x15m ... 8x1b       their 8-expert top-2 counterparts (seed 002 eq. 15 and
                       App. A.3: Softmax(TopK(Wx)), balance weight 1e-3, no
                       z-loss), trained as the dense model but with Table 5's
                       MoE learning rate.
"""
from moe_jax.errors import ConfigError

_SEED000_VOCAB = 200_704
_SEED002_VOCAB = 32_000


def _shape(vocab, layers, d, heads, kv_heads, d_ff, head_dim=None, init_std=0.02):
  return dict(vocab_size=vocab, num_layers=layers, d_model=d, num_heads=heads,
              num_kv_heads=kv_heads, head_dim=head_dim or d // heads, d_ff=d_ff,
              init_std=init_std)


_SEED000_BALANCE = dict(num_shared_experts=0, use_bias=True, balance_loss_weight=0.0,
                        z_loss_weight=0.0)


def _seed000_train(steps=None, batch=None, lr=None):
  train = dict(seq_len=8192, opt=dict(schedule='wsd', decay_fraction=0.1))
  if steps:
    train.update(total_steps=steps)
  if batch:
    train.update(batch_size=batch)
  if lr:
    train['opt'].update(lr=lr)
  return train


def _seed000_interleaved(layers, d, d_ff, heads, groups, expert_ff, top_k, steps=None):
  model = _shape(_SEED000_VOCAB, layers, d, heads, groups, d_ff)
  moe = dict(num_experts=32, top_k=top_k, d_ff=expert_ff, every=2, first_dense=0,
             **_SEED000_BALANCE)
  return model, moe, _seed000_train(steps)


def _seed000_full(layers, d, d_ff, heads, groups, expert_ff, steps, batch, lr):
  model = _shape(_SEED000_VOCAB, layers, d, heads, groups, d_ff)
  moe = dict(num_experts=256, top_k=8, d_ff=expert_ff, every=1, first_dense=2,
             **_SEED000_BALANCE)
  return model, moe, _seed000_train(steps, batch, lr)


# name: (n_layer, d_model, n_head, init std, warmup, max iter, batch, LR dense,
# LR 8x) from seed 002 Tables 3 and 5.
_SEED002 = {
    '15m': (9, 320, 4, 0.035, 200, 17_600, 128, 8e-3, 2e-3),
    '44m': (12, 480, 8, 0.029, 200, 17_600, 256, 4e-3, 2e-3),
    '0.1b': (15, 640, 8, 0.025, 200, 17_600, 512, 4e-3, 2e-3),
    '0.2b': (21, 832, 8, 0.022, 400, 35_200, 512, 2e-3, 2e-3),
    '0.5b': (26, 1120, 16, 0.019, 800, 70_400, 512, 4e-4, 4e-4),
    '1b': (30, 1504, 16, 0.016, 800, 70_400, 1024, 4e-4, 4e-4),
}


def _seed002_train(warmup, steps, batch, lr):
  """Seed 002 Tables 4-5 and App. A.5."""
  return dict(seq_len=1024, batch_size=batch, total_steps=steps, opt=dict(
      name='adamw', lr=lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, clip_norm=1.0,
      schedule='wsd', warmup_steps=warmup, decay_fraction=0.1, decay_shape='linear',
      final_lr_fraction=0.1))


def _table():
  table = {'tiny': (dict(vocab_size=0, num_layers=2, d_model=64, num_heads=4, num_kv_heads=2,
                         head_dim=16, d_ff=256, init_std=0.02), {}, {})}
  table['20layer'] = _seed000_interleaved(20, 2048, 7168, 16, 16, 3072, 2)
  table['10layer'] = _seed000_interleaved(10, 1024, 3584, 8, 8, 1536, 2, steps=100_000)
  table['8layer'] = _seed000_interleaved(8, 768, 2688, 6, 6, 1152, 1)
  table['full_4layer'] = _seed000_full(4, 256, 896, 2, 2, 384, 16_790, 16, 1.69e-2)
  table['full_6layer'] = _seed000_full(6, 256, 896, 2, 2, 384, 17_611, 16, 1.16e-2)
  table['full_8layer'] = _seed000_full(8, 384, 1344, 3, 3, 576, 29_663, 16, 5.95e-3)
  table['full_10layer'] = _seed000_full(10, 512, 1792, 4, 4, 768, 22_741, 32, 3.75e-3)
  for size, (layers, d, heads, std, warmup, steps, batch, lr, lr_moe) in _SEED002.items():
    model = _shape(_SEED002_VOCAB, layers, d, heads, heads, 4 * d, init_std=std)
    table[f'dense_{size}'] = (model, dict(num_experts=0, z_loss_weight=0.0),
                              _seed002_train(warmup, steps, batch, lr))
    table[f'8x{size}'] = (model, dict(
        num_experts=8, top_k=2, d_ff=0, every=1, first_dense=0, num_shared_experts=0,
        order='topk_then_softmax', balance_loss_weight=1e-3, z_loss_weight=0.0),
                          _seed002_train(warmup, steps, batch, lr_moe))
  return table


PRESETS = _table()


def apply(config, name):
  """Writes preset `name` into `config` (in place): `model`, `moe` and the
  paper's training settings (top-level keys and `opt`)."""
  if name not in PRESETS:
    raise ConfigError(f'model preset {name!r} is not one of {sorted(PRESETS)}')
  model, moe, train = PRESETS[name]
  config.model.update(model)
  config.moe.update(moe)
  config.opt.update(train.get('opt', {}))
  config.update({k: v for k, v in train.items() if k != 'opt'})
  return config
