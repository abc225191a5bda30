"""A recipe declares its inputs and transition.grow feeds them: a recipe
that reads training batches before it builds gets the ones training reads
next, from the upcycle command and from an in-run transition alike; a
several-source recipe gets every source. Both recipes are one file each
(tests/upcycle/toy_recipes.py), registered as a user's would be."""
import importlib
import json
import os
import sys

import jax
import numpy as np
import pytest

from configs import common
from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.train import trainer
from moe_jax.upcycle import recipes, run, transition
from moe_jax.workdir import checkpoint, lineage
from tests.train import tiny

_TOYS = 'tests.upcycle.toy_recipes'


@pytest.fixture
def toys(monkeypatch):
  """The toy recipes, registered on a copy of the registry for one test."""
  monkeypatch.setattr(recipes.REGISTRY, 'entries', dict(recipes.REGISTRY.entries))
  module = sys.modules.get(_TOYS)
  module = importlib.reload(module) if module else importlib.import_module(_TOYS)
  return module


@pytest.fixture(scope='module')
def dense(tmp_path_factory):
  """Two tiny dense workdirs, 3 steps each, of seeds 0 and 1."""
  root = tmp_path_factory.mktemp('dense')
  out = []
  for seed in (0, 1):
    out.append(str(root / f'seed{seed}'))
    trainer.train_and_evaluate(tiny.config(**{'moe.num_experts': 0, 'total_steps': 3,
                                              'eval_every_steps': 0, 'seed': seed}), out[-1])
  return out


def _up(recipe, **args):
  up = common.upcycle()
  up.recipe = recipe
  up.args.update(args)
  return up


def _stream_tokens(config, workdir, skip, take, toys):
  """The first tokens of training batches skip .. skip+take-1 of `config`'s
  stream, read independently of the growth."""
  it = pipeline.train_iterator(config, pipeline.tokenizer_for(config, workdir))
  batches = [next(it) for _ in range(skip + take)][skip:]
  return [[int(t) for t in np.asarray(b['inputs']).reshape(-1)[:toys.PEEK_TOKENS]]
          for b in batches]


def test_a_recipe_that_reads_batches_gets_the_next_ones_from_the_command(dense, toys,
                                                                        tmp_path):
  dst = str(tmp_path / 'peeked')
  report = run.upcycle_checkpoint(_up('toy_peek', batches=2), dense[0], dst)
  with open(os.path.join(dst, 'toy_peek.json')) as f:
    got = json.load(f)['first_tokens']
  # The source trained 3 steps; its data position is batch 3, which the
  # grown model trains on first.
  config = tiny.config(**{'moe.num_experts': 0, 'total_steps': 3, 'eval_every_steps': 0})
  assert got == _stream_tokens(config, dense[0], skip=3, take=2, toys=toys)
  assert report['recipe']['args']['first_tokens'] == got
  assert report['loss_after'] == report['loss_before']   # the params are copied


def test_a_recipe_that_reads_batches_gets_the_next_ones_in_run(toys, tmp_path):
  config = tiny.config(**{'moe.num_experts': 0, 'total_steps': 3, 'eval_every_steps': 0})
  config.upcycle.update(step=2, recipe='toy_peek')
  config.upcycle.args.update(batches=2)
  workdir = str(tmp_path / 'in_run')
  trainer.train_and_evaluate(config, workdir)
  with open(os.path.join(workdir, 'toy_peek.json')) as f:
    got = json.load(f)['first_tokens']
  assert got == _stream_tokens(config, workdir, skip=2, take=2, toys=toys)
  origin = lineage.read(workdir)['stages'][-1]['origin']
  assert origin['how'] == 'in_run' and origin['args']['first_tokens'] == got


def test_a_several_source_recipe_gets_every_source(dense, toys, tmp_path):
  dst = str(tmp_path / 'pair')
  report = run.upcycle_checkpoint(_up('toy_pair_mean'), ','.join(dense), dst)
  assert [os.path.dirname(os.path.dirname(r['source'])) for r in report['sources']] == dense
  config = tiny.config(**{'moe.num_experts': 0})
  config.model.vocab_size = pipeline.tokenizer_for(config, dense[0]).vocab_size
  abstract = checkpoint.abstract_like(transition.abstract_params(config))
  a, b, grown = (checkpoint.restore_params(w, abstract)[0] for w in (*dense, dst))
  # (a + b) / 2 is one rounding in float32 either way, so equal to the bit.
  jax.tree.map(lambda x, y, m: np.testing.assert_array_equal(
      np.asarray(m), (np.asarray(x) + np.asarray(y)) / 2), a, b, grown)
  origin = lineage.read(dst)['stages'][-1]['origin']
  assert [p['checkpoint'] for p in origin['parents']] == [r['source'] for r in report['sources']]
  assert origin['args']['num_sources'] == 2


def test_the_number_of_sources_is_the_recipes(dense, toys, tmp_path):
  with pytest.raises(ConfigError, match='toy_pair_mean needs --src=A,B'):
    run.upcycle_checkpoint(_up('toy_pair_mean'), dense[0], str(tmp_path / 'x'))
  with pytest.raises(ConfigError, match='grows one source; --src names 2'):
    run.upcycle_checkpoint(_up('toy_peek'), list(dense), str(tmp_path / 'x'))
  config = tiny.config(**{'moe.num_experts': 0, 'total_steps': 3})
  config.upcycle.update(step=2, recipe='toy_pair_mean')
  with pytest.raises(ConfigError, match='grows several sources'):
    trainer.train_and_evaluate(config, str(tmp_path / 'in_run'))
  assert not os.path.exists(tmp_path / 'x') and not os.path.exists(tmp_path / 'in_run')
