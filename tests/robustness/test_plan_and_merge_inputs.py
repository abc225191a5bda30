"""plan --memory with a device of no bytes, and a merge of one checkpoint with
itself (the same path, a link to it, its workdir beside its newest step):
one `error:` line, exit 2, nothing written."""
import os
import types

import pytest

from moe_jax import schema
from moe_jax.errors import ConfigError
from moe_jax.upcycle import sources
from tests.robustness import rows, tiny_config
from tests.robustness.rows import param

_MERGE = '--config={configs}/upcycle/merge.py --dst={tmp}/merged --src='

ROWS = [
    param('plan_device_memory_zero', '--memory --config={cfg} --device_memory=0GB',
          r"--device_memory='0GB' must be at least 1 byte", module='moe_jax.plan'),
    param('merge_the_same_path_twice', _MERGE + '{wd},{wd}',
          r'--src names checkpoint .*/checkpoints/2 twice', module='moe_jax.upcycle'),
    param('merge_a_link_to_a_source', _MERGE + '{wd},{tmp}/link',
          r'--src names checkpoint .*/checkpoints/2 twice \(.* and .*/link\)',
          lambda p: os.symlink(p['wd'], os.path.join(p['tmp'], 'link')), module='moe_jax.upcycle'),
    param('merge_a_workdir_and_its_newest_step', _MERGE + '{wd},{wd}/checkpoints/2',
          r'--src names checkpoint .*/checkpoints/2 twice', module='moe_jax.upcycle'),
]


@pytest.mark.parametrize('row', ROWS)
def test_refuses_bad_input(cli, trained, tmp_path, row):
  rows.check(cli, row.module, row, tmp_path, trained)



def _source(tmp_path, **model):
  config = tiny_config.get_config()
  config.model.update(dict(vocab_size=256, **model))   # as a run's config.json holds it
  return types.SimpleNamespace(config=config, ckpt=str(tmp_path / 'ckpt'), workdir=str(tmp_path))


_HOW_COMPUTED = {'cross_entropy': 'fused', 'remat': 'full', 'loss_chunk': 64,
                 'attention': 'blocked', 'scan_layers': True}


def test_each_numerics_key_has_a_merge_case():
  """A key flagged numerics (moe_jax/schema) is one merge ignores: each has a case below."""
  assert set(schema.NUMERICS_KEYS) == {f'model.{k}' for k in _HOW_COMPUTED}


@pytest.mark.parametrize('key, value', _HOW_COMPUTED.items())
def test_merge_allows_sources_that_differ_in_how_they_compute(tmp_path, key, value):
  """A numerics or memory choice is not an architecture: two runs that differ
  in it merge (the merged model takes --src 0's)."""
  sources.check_same_architecture([_source(tmp_path), _source(tmp_path, **{key: value})])


def test_merge_still_refuses_another_architecture(tmp_path):
  with pytest.raises(ConfigError, match=r"model.norm_position='post' there, 'pre' in --src 0"):
    sources.check_same_architecture([_source(tmp_path), _source(tmp_path, norm_position='post')])
