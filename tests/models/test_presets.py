"""Presets against the seed papers' tables, through accounting and jax.eval_shape.

Nothing here allocates a full-size model: `jax.eval_shape` gives the param tree,
and `accounting` must count exactly what the tree holds.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import common
from moe_jax.errors import ConfigError
from moe_jax.models import accounting
from moe_jax.models import config as model_config
from moe_jax.models import presets
from moe_jax.models import transformer
from moe_jax.train import optimizer


def _cfg(name, vocab_size=None):
  config = common.base()
  presets.apply(config, name)
  return model_config.from_config(config, vocab_size=vocab_size)


def _tree_size(cfg):
  shapes = jax.eval_shape(transformer.Transformer(cfg).init, jax.random.key(0),
                          jnp.zeros((1, 8), jnp.int32))
  return sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))


@pytest.mark.parametrize('name', sorted(presets.PRESETS))
def test_accounting_counts_the_param_tree(name):
  cfg = _cfg(name, vocab_size=256)
  assert _tree_size(cfg) == accounting.counts(cfg).total


@pytest.mark.parametrize('moe,tie,model', [
    (dict(num_experts=4, num_shared_experts=2, use_bias=True, every=2), True, {}),
    (dict(num_experts=4, router='hash', d_ff=24, first_dense=1), False, {}),
    (dict(num_experts=0), False, dict(qk_norm=True, qkv_bias=True))])
def test_accounting_counts_variants(moe, tie, model):
  config = common.base()
  config.model.vocab_size = 97
  config.model.tie_embeddings = tie
  config.model.update(model)
  config.moe.update(moe)
  cfg = model_config.from_config(config)
  assert _tree_size(cfg) == accounting.counts(cfg).total


# Seed 002 Table 3: (N_dense, N_MoE total with 8 experts), non-embedding.
# Exact: no vocabulary involved, and with SwiGLU at d_mlp = 4 d_model, MHA and
# no biases the tables' numbers are 16 L d^2 + (2L + 1) d (+ 8 L d router).
_SEED002_TABLE3 = {
    '15m': (14_751_680, 92_189_120),
    '44m': (44_248_800, 276_538_080),
    '0.1b': (98_323_840, 614_496_640),
    '0.2b': (232_623_040, 1_453_845_952),
    '0.5b': (521_889_760, 3_261_732_320),
    '1b': (1_085_859_424, 6_786_500_704),
}


@pytest.mark.parametrize('size', sorted(_SEED002_TABLE3))
def test_seed002_table3_exact(size):
  n_dense, n_moe = _SEED002_TABLE3[size]
  dense, moe = accounting.counts(_cfg(f'dense_{size}')), accounting.counts(_cfg(f'8x{size}'))
  assert dense.total_nonembed == dense.active_nonembed == n_dense
  assert moe.total_nonembed == n_moe


@pytest.mark.parametrize('size', sorted(_SEED002_TABLE3))
def test_seed002_eqs_4_to_6(size):
  # Eqs. 4-6 drop the O(L d) terms (norms, router): within 0.5% at these sizes.
  cfg = _cfg(f'8x{size}')
  lay, d = cfg.num_layers, cfg.d_model
  dense = accounting.counts(_cfg(f'dense_{size}'))
  moe = accounting.counts(cfg)
  np.testing.assert_allclose(dense.total_nonembed, 16 * lay * d**2, rtol=5e-3)
  np.testing.assert_allclose(moe.active_nonembed, (4 + 12 * 2) * lay * d**2, rtol=5e-3)
  np.testing.assert_allclose(moe.total_nonembed, (4 + 12 * 8) * lay * d**2, rtol=5e-3)


# Seed 000 Table 6(b), in millions: router, dense layer, MoE act. layer, MoE
# total layer, embed, act. params w/ emb, total params w/ emb; then train
# tokens (B) and total train FLOPs (context 8192).
_SEED000_TABLE6B = {
    '20layer': (0.07, 60.8, 54.6, 620.8, 822.1, 1976.3, 7638.6, 383.5, 3.43e21),
    '10layer': (0.03, 15.2, 13.7, 155.2, 411.0, 555.4, 1263.2, 92.6, 1.27e20),
    '8layer': (0.02, 8.6, 3.8, 87.3, 308.3, 362.6, 691.8, 59.5, 3.36e19),
}


def _close_to_printed(value, printed, digits):
  """Agrees with a table entry to its printed precision (+-1 in the last digit)."""
  assert abs(value - printed) <= 10.0**-digits + 1e-9, (value, printed)


@pytest.mark.parametrize('name', sorted(_SEED000_TABLE6B))
def test_seed000_table6b(name):
  router, dense, moe_act, moe_total, embed, act, total, tokens_b, flops = _SEED000_TABLE6B[name]
  cfg = _cfg(name)
  c = accounting.counts(cfg)
  _close_to_printed(c.router / 1e6, router, 2)
  for value, printed in [(c.dense_layer, dense), (c.moe_total_layer, moe_total),
                         (c.embedding, embed), (c.active, act), (c.total, total)]:
    _close_to_printed(value / 1e6, printed, 1)
  if name == '8layer':
    # This row contradicts itself: its Act. Params (362.6M = 4 x 8.6 + 4 x MoE
    # act. + 308.3) imply 5.0M per MoE layer, not the 3.8M printed, and its
    # train FLOPs match neither; we check the self-consistent columns only.
    np.testing.assert_allclose(c.moe_active_layer / 1e6, (act - 4 * dense - embed) / 4,
                               rtol=2e-2)
    return
  _close_to_printed(c.moe_active_layer / 1e6, moe_act, 1)
  np.testing.assert_allclose(accounting.train_flops(cfg, 8192, tokens_b * 1e9), flops, rtol=2e-2)


# Seed 000 Table 7(b): router, dense layer, MoE act., MoE total, activated,
# total, FLOPs/token. Printed to 3 significant digits.
_SEED000_TABLE7B = {
    'full_4layer': (65.5e3, 0.95e6, 2.69e6, 75.8e6, 110e6, 256e6, 9.50e7),
    'full_6layer': (65.5e3, 0.95e6, 2.69e6, 75.8e6, 115e6, 408e6, 1.54e8),
    'full_8layer': (98.3e3, 2.14e6, 6.00e6, 171e6, 194e6, 1.18e9, 3.97e8),
    'full_10layer': (131e3, 3.80e6, 10.6e6, 303e6, 298e6, 2.64e9, 8.15e8),
}


@pytest.mark.parametrize('name', sorted(_SEED000_TABLE7B))
def test_seed000_table7b(name):
  router, dense, moe_act, moe_total, act, total, flops = _SEED000_TABLE7B[name]
  cfg = _cfg(name)
  assert len(cfg.moe_layers) == cfg.num_layers - 2
  c = accounting.counts(cfg)
  # 3 significant digits, and our router also holds the E-entry bias: 0.5%.
  for value, printed in [(c.router, router), (c.dense_layer, dense), (c.moe_active_layer, moe_act),
                         (c.moe_total_layer, moe_total), (c.active, act), (c.total, total)]:
    np.testing.assert_allclose(value, printed, rtol=5e-3)
  # The column is labelled forward FLOPs but equals forward + backward
  # (3 x (2 N_act + 2 L ctx d)) to within 2%, as Table 6(b)'s train FLOPs do.
  np.testing.assert_allclose(3 * accounting.forward_flops_per_token(cfg, 8192), flops, rtol=2e-2)


def test_tiny_preset_is_common_model_defaults():
  config = common.base()
  before = config.to_dict()
  presets.apply(config, 'tiny')
  assert config.to_dict() == before


# Seed 002 Table 5 (warmup, max iter, batch, LR dense, LR 8x), Table 4, App. A.5.
_SEED002_TABLE5 = {
    '15m': (200, 17_600, 128, 8e-3, 2e-3), '44m': (200, 17_600, 256, 4e-3, 2e-3),
    '0.1b': (200, 17_600, 512, 4e-3, 2e-3), '0.2b': (400, 35_200, 512, 2e-3, 2e-3),
    '0.5b': (800, 70_400, 512, 4e-4, 4e-4), '1b': (800, 70_400, 1024, 4e-4, 4e-4),
}


@pytest.mark.parametrize('size', sorted(_SEED002_TABLE5))
def test_seed002_presets_train_as_the_paper(size):
  warmup, steps, batch, lr_dense, lr_moe = _SEED002_TABLE5[size]
  for name, lr in ((f'dense_{size}', lr_dense), (f'8x{size}', lr_moe)):
    config = presets.apply(common.base(), name)
    assert (config.seq_len, config.batch_size, config.total_steps) == (1024, batch, steps)
    assert (config.opt.lr, config.opt.warmup_steps, config.opt.weight_decay) == (lr, warmup, 0.1)
    assert config.moe.z_loss_weight == 0.0 and not config.model.tie_embeddings
    # WSD: the peak until the last 10%, then linear to 10% of the peak.
    lr_fn = optimizer.schedule(config.opt, steps)
    np.testing.assert_allclose([lr_fn(steps // 2), lr_fn(int(0.9 * steps) - 1), lr_fn(steps)],
                               [lr, lr, 0.1 * lr], rtol=1e-5)


# Seed 000 Table 7(c): steps, batch, LR; context 8192 (Table 7).
_SEED000_TABLE7C = {'full_4layer': (16_790, 16, 1.69e-2), 'full_6layer': (17_611, 16, 1.16e-2),
                    'full_8layer': (29_663, 16, 5.95e-3), 'full_10layer': (22_741, 32, 3.75e-3)}


@pytest.mark.parametrize('name', sorted(_SEED000_TABLE7C) + ['20layer', '10layer', '8layer'])
def test_seed000_presets_train_as_the_paper(name):
  config = presets.apply(common.base(), name)
  assert config.seq_len == 8192 and config.opt.schedule == 'wsd'
  assert config.opt.decay_fraction == 0.1    # §5.1: each stage ends in a 10% anneal
  assert config.moe.use_bias and config.moe.balance_loss_weight == config.moe.z_loss_weight == 0
  if name in _SEED000_TABLE7C:
    assert (config.total_steps, config.batch_size, config.opt.lr) == _SEED000_TABLE7C[name]
  if name == '10layer':
    assert config.total_steps == 100_000   # Table 3(a): T = 100K


def test_unknown_preset_is_config_error():
  with pytest.raises(ConfigError, match="'huge'"):
    presets.apply(common.base(), 'huge')
