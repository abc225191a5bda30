"""Several sources of one growth (merge): each source's report is of its own
params on its own batches, and the architecture check compares the union of
the sources' param paths and tokenizer files (a leaf or a file only one side
has is a difference, from either side)."""
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.upcycle import merge as merge_config
from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.upcycle import forward, recipes, sources, transition
from tests.upcycle import toy


def _batch(seed, rows=2, length=6):
  tokens = np.random.default_rng(seed).integers(0, 11, size=(rows, length + 1))
  return dict(inputs=jnp.asarray(tokens[:, :-1], jnp.int32),
              targets=jnp.asarray(tokens[:, 1:], jnp.int32),
              segment_ids=jnp.ones((rows, length), jnp.int32),
              positions=jnp.tile(jnp.arange(length, dtype=jnp.int32), (rows, 1)),
              loss_mask=jnp.ones((rows, length), jnp.float32))


def test_each_source_report_is_of_its_own_params_and_batches():
  src = toy.config()
  src.upcycle = merge_config.get_config('top_k=1')
  dst = transition.target_config(src, 2)
  params = [toy.params(src, seed=s) for s in (0, 1)]
  batches = [[_batch(10)], [_batch(11)]]
  growth = transition.grow(src, dst, [recipes.Input(src, p) for p in params], batches)
  before, after = jax.jit(forward.lm_loss(src)), jax.jit(forward.lm_loss(dst))
  for i, report in enumerate(growth.reports):
    (batch,) = batches[i]
    assert report['loss_before'] == pytest.approx(float(before(params[i], batch)), rel=1e-5)
    assert report['loss_after'] == pytest.approx(float(after(growth.params, batch)), rel=1e-5)
  # The sources differ, and so do their batches: a report of the wrong one would show.
  assert growth.reports[0]['loss_before'] != pytest.approx(growth.reports[1]['loss_before'])
  assert growth.reports[0]['loss_after'] != pytest.approx(growth.reports[1]['loss_after'])


def _source(tmp_path, name, tokenizer=None, **moe):
  workdir = tmp_path / name
  workdir.mkdir()
  if tokenizer is not None:
    (workdir / pipeline.TOKENIZER_FILES[0]).write_text(tokenizer)
  return types.SimpleNamespace(config=toy.config(num_experts=4, **moe), ckpt=name,
                               workdir=str(workdir))


@pytest.mark.parametrize('first, second, there, here', [
    (dict(use_bias=True), {}, '(absent)', '(4,)'),     # the leaf only in --src 0
    ({}, dict(use_bias=True), '(4,)', '(absent)'),     # only in --src 1
])
def test_a_param_leaf_only_one_source_has_is_named(tmp_path, first, second, there, here):
  pair = [_source(tmp_path, 'a', **first), _source(tmp_path, 'b', **second)]
  with pytest.raises(ConfigError, match=rf'param layers_0/moe/router/bias has shape '
                                        rf'{re.escape(there)} there, {re.escape(here)} in --src 0'):
    sources.check_same_architecture(pair)


@pytest.mark.parametrize('first, second', [('{}', None), (None, '{}'), ('{}', '{ }')])
def test_a_tokenizer_file_only_one_source_has_is_a_difference(tmp_path, first, second):
  pair = [_source(tmp_path, 'a', first), _source(tmp_path, 'b', second)]
  with pytest.raises(ConfigError, match=rf'another tokenizer .*{pipeline.TOKENIZER_FILES[0]}'):
    sources.check_same_architecture(pair)
  sources.check_same_architecture([_source(tmp_path, 'c', first), _source(tmp_path, 'd', first)])
