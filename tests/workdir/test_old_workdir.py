"""An old workdir reads, key by key, as it always has.

old_workdir/config.json is a config.json written before every added key
existed (today's base config without the keys whose schema field carries
`added`, the value an old run had: moe_jax/schema/field.py). Its upgraded
config is compared key by key with old_workdir/upgraded.json, the flat
{key: value} today's code read from it when this test was written: a changed
`added` value or a changed upgrade fails here, naming the keys. A deliberate change regenerates the expectation, and the
commit says why:

  python -m tests.workdir.test_old_workdir    # rewrites old_workdir/upgraded.json

A key added to the config later is checked for being upgraded at all
(every key a new config has): a new field without `added` fails
`test_an_old_workdir_gets_every_key_a_new_config_has`, and it joins the
expectation when it is regenerated.
"""
import json
import os

from configs import common
from moe_jax import schema
from moe_jax.workdir import files, saved_config

_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'old_workdir')
_EXPECTED = os.path.join(_DIR, 'upgraded.json')


def _flat(record, prefix=''):
  out = {}
  for key, value in record.items():
    if isinstance(value, dict) and value:
      out.update(_flat(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = value
  return out


def _upgraded(loader):
  return _flat(json.loads(loader(_DIR).to_json()))


def test_an_old_workdir_reads_key_by_key_as_recorded():
  with open(_EXPECTED) as f:
    want = json.load(f)['upgraded']
  for loader in (files.read_config, saved_config.load):
    got = _upgraded(loader)
    changed = [f'{k}: {want[k]!r} -> {got.get(k, "(absent)")!r}' for k in sorted(want)
               if k not in got or got[k] != want[k] or type(got[k]) is not type(want[k])]
    assert not changed, (f'{loader.__module__}.{loader.__name__}: an old workdir now reads '
                         'differently: ' + '; '.join(changed))


def test_every_key_an_old_run_lacks_has_the_value_it_ran_with():
  """A field the old config.json lacks carries `added` (a new key is one
  field: its old-run value is part of it)."""
  with open(os.path.join(_DIR, 'config.json')) as f:
    old = _flat(json.load(f))
  assert [key for key, f in schema.fields() if key not in old and 'added' not in f.metadata] == []


def test_an_old_workdir_gets_every_key_a_new_config_has():
  new = _flat(json.loads(common.base().to_json()))
  assert sorted(set(new) - set(_upgraded(files.read_config))) == []


def main():
  record = dict(note='tests/workdir/test_old_workdir.py: regenerate with python -m '
                     'tests.workdir.test_old_workdir, only for a deliberate change',
                upgraded=_upgraded(files.read_config))
  files.write_json(_EXPECTED, record)


if __name__ == '__main__':
  main()
