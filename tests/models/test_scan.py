"""The scanned block stack (model.scan_layers, moe_jax/models/scan.py): its
groups cover every stack a config can express, and the model keeps its params
tree and computes the same function (the train step's equivalence, with remat
and gradient accumulation, is in tests/train/test_memory_paths.py)."""
import itertools

import jax
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config
from moe_jax.models import scan, transformer
from tests.models import fixtures


def _cfg(scan_layers=False, num_layers=2, **moe):
  config = fixtures.tiny_config(**moe)
  config.model.update(num_layers=num_layers, scan_layers=scan_layers)
  return model_config.from_config(config)


def test_groups_cover_every_stack():
  """Expanded in order, the groups give each layer its own kind (dense / MoE)."""
  seen = set()
  for n, every, first, experts in itertools.product(range(1, 10), (1, 2, 3), (0, 1, 3), (0, 4)):
    try:
      cfg = _cfg(num_layers=n, num_experts=experts, every=every, first_dense=first)
    except ConfigError:   # no MoE layer left: not a stack the config can build
      continue
    got = [is_moe for _, pattern, repeats in scan.groups(cfg) for is_moe in pattern * repeats]
    assert got == [cfg.is_moe_layer(i) for i in range(n)], (n, every, first, experts)
    starts = [start for start, _, _ in scan.groups(cfg)]
    assert starts == sorted(starts) and starts[0] == 0
    seen.add(len(scan.groups(cfg)))
  assert seen == {1, 2, 3}   # prefix, period and rest all occur


@pytest.mark.parametrize('stack', [dict(num_layers=5, num_experts=4, every=2),
                                   dict(num_layers=4, num_experts=4, every=2, first_dense=1,
                                        use_bias=True),
                                   dict(num_layers=3, num_experts=0)])
def test_scanned_stack_is_the_loop(stack):
  """Same params tree (paths, shapes, values from init) and the same logits and
  router statistics."""
  loop, scanned = _cfg(**stack), _cfg(scan_layers=True, **stack)
  tokens = fixtures.tokens(3, 11)
  params = transformer.Transformer(loop).init(jax.random.key(0), tokens)['params']
  params_scanned = transformer.Transformer(scanned).init(jax.random.key(0), tokens)['params']
  jax.tree.map(np.testing.assert_array_equal, params_scanned, params)
  apply = lambda cfg: jax.jit(lambda p: transformer.Transformer(cfg).apply(
      {'params': p}, tokens, train=True))(params)
  got, want = apply(scanned), apply(loop)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, want)


def test_routing_record_and_decoding_with_scan_layers():
  """The paths that need per-layer collections (routing analysis's
  `intermediates`, decoding's `cache`) still give the loop's results."""
  stack = dict(num_layers=3, num_experts=4, every=1)
  loop, scanned = _cfg(**stack), _cfg(scan_layers=True, **stack)
  tokens = fixtures.tokens(2, 7)
  params = transformer.Transformer(loop).init(jax.random.key(0), tokens)['params']
  for kw in (dict(mutable=['intermediates']), dict(decode=True, mutable=['cache'])):
    apply = lambda cfg: jax.jit(lambda p: transformer.Transformer(cfg).apply(
        {'params': p}, tokens, **kw))(params)
    (_, want), (_, got) = apply(loop), apply(scanned)
    assert set(got[kw['mutable'][0]]) == {'layers_0', 'layers_1', 'layers_2'}
    jax.tree.map(np.testing.assert_array_equal, got, want)


def test_jitter_reaches_every_scanned_layer():
  """Router jitter under scan: each MoE layer's routing input gets noise
  (its router entropy differs from the jitter-free pass)."""
  stack = dict(num_layers=2, num_experts=4, every=1)
  params = transformer.Transformer(_cfg(**stack)).init(
      jax.random.key(0), fixtures.tokens(1, 5))['params']
  tokens = fixtures.tokens(8, 64)

  def probs(jitter):
    cfg = _cfg(scan_layers=True, jitter=jitter, **stack)
    _, aux = jax.jit(lambda p: transformer.Transformer(cfg).apply(
        {'params': p}, tokens, train=True, rngs={'jitter': jax.random.key(1)}))(params)
    return {k: float(v['entropy']) for k, v in aux['moe'].items()}

  plain, noisy = probs(0.0), probs(0.5)
  assert all(np.isfinite(v) for v in noisy.values())
  assert all(noisy[k] != plain[k] for k in plain)
