"""An old workdir reads, key by key, as it always has.

old_workdir/config.json is a config.json written before every added key
existed (today's base config without the keys whose schema field carries
`added`, the value an old run had: moe_jax/schema/field.py);
old_in_run_workdir/config.json one of an in-run expand_experts transition
written while its utility_metric, utility_batches and split_bias were keys
of the upcycle group (schema/upcycle.py's MOVED_TO_ARGS: set there, and one
also in its args, which wins), and an upcycle_report.json in the in-run
transition's schema of then (written by the trainer at acb70e4 for another
run: tests/train/tiny.py's config, expand_experts at step 2 of 4,
report_batches=2). Each upgraded config is compared key by key with the
upgraded.json beside it, the flat {key: value} today's code read from it
when this test was written: a changed `added` value or a changed upgrade
fails here, naming the keys. A deliberate change regenerates the
expectations, and the commit says why:

  python -m tests.workdir.test_old_workdir    # rewrites both upgraded.json

A key added to the config later is checked for being upgraded at all
(every key a new config has): a new field without `added` fails
`test_an_old_workdir_gets_every_key_a_new_config_has`, and it joins the
expectation when it is regenerated.
"""
import json
import os

import pytest

from configs import common
from moe_jax import schema
from moe_jax.schema import upcycle as upcycle_schema
from moe_jax.upcycle import transition
from moe_jax.workdir import files, saved_config

_HERE = os.path.dirname(os.path.abspath(__file__))
_DIRS = [os.path.join(_HERE, name) for name in ('old_workdir', 'old_in_run_workdir')]


def _flat(record, prefix=''):
  out = {}
  for key, value in record.items():
    if isinstance(value, dict) and value:
      out.update(_flat(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = value
  return out


def _upgraded(loader, directory):
  return _flat(json.loads(loader(directory).to_json()))


@pytest.mark.parametrize('directory', _DIRS, ids=os.path.basename)
def test_an_old_workdir_reads_key_by_key_as_recorded(directory):
  with open(os.path.join(directory, 'upgraded.json')) as f:
    want = json.load(f)['upgraded']
  for loader in (files.read_config, saved_config.load):
    got = _upgraded(loader, directory)
    changed = [f'{k}: {want[k]!r} -> {got.get(k, "(absent)")!r}' for k in sorted(want)
               if k not in got or got[k] != want[k] or type(got[k]) is not type(want[k])]
    assert not changed, (f'{loader.__module__}.{loader.__name__}: an old workdir now reads '
                         'differently: ' + '; '.join(changed))


def test_every_key_an_old_run_lacks_has_the_value_it_ran_with():
  """A field the old config.json lacks carries `added` (a new key is one
  field: its old-run value is part of it)."""
  with open(os.path.join(_DIRS[0], 'config.json')) as f:
    old = _flat(json.load(f))
  assert [key for key, f in schema.fields() if key not in old and 'added' not in f.metadata] == []


@pytest.mark.parametrize('directory', _DIRS, ids=os.path.basename)
def test_an_old_workdir_gets_every_key_a_new_config_has(directory):
  new = _flat(json.loads(common.base().to_json()))
  got = _upgraded(files.read_config, directory)
  # An empty group of a new config (upcycle.args) is there when it holds keys.
  assert sorted(k for k in set(new) - set(got) if not any(g.startswith(k + '.') for g in got)) == []


def test_an_old_in_run_transition_grows_with_the_options_it_had():
  """What the recipe read then: the group's keys where its args left them
  out (utility_metric, split_bias), its args where they set them
  (utility_batches 3 over the group's 2)."""
  config = files.read_config(_DIRS[1])
  assert not set(upcycle_schema.MOVED_TO_ARGS) & set(config.upcycle)   # moved, none left on the group
  options = transition.options(config.upcycle)
  assert (options.utility_metric, options.utility_batches, options.split_bias) == (
      'saliency', 3, True)
  assert transition.batches_needed(config) == 3


def test_an_old_in_run_report_reads_in_the_one_schema():
  """The in-run transition wrote its report in its own schema before
  transition.report_record: the recipe's name as `recipe`, its counts
  beside it. files.read_report reads it as the growth record of today."""
  with open(os.path.join(_DIRS[1], files.REPORT)) as f:
    raw = json.load(f)
  report = files.read_report(_DIRS[1])
  assert report['recipe'] == {'recipe': 'expand_experts', 'args': {'counts': {
      'layers_0': [2, 2, 2, 2], 'layers_1': [2, 2, 2, 2]}}}
  assert 'counts' not in report
  assert {k: report[k] for k in ('loss_before', 'loss_after', 'max_abs_dlogits', 'tokens',
                                 'step')} == {k: raw[k] for k in raw if k not in ('recipe',
                                                                                  'counts')}
  assert files.read_report(_DIRS[0]) is None   # it did not grow


def main():
  for directory in _DIRS:
    record = dict(note='tests/workdir/test_old_workdir.py: regenerate with python -m '
                       'tests.workdir.test_old_workdir, only for a deliberate change',
                  upgraded=_upgraded(files.read_config, directory))
    files.write_json(os.path.join(directory, 'upgraded.json'), record)


if __name__ == '__main__':
  main()
