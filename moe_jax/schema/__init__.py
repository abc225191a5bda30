"""The config's schema: every group of a run's config as a dataclass, each key
one field that carries its whole contract (schema/field.py: default, bounds
or choices, the value runs before it had, whether it fixes shapes or the data
stream), and the one table of groups that every whole-config check reads.

Adding a config key is one field in its group's file here (and its test):
configs/common.py builds the group from the defaults, `check` refuses a value
past its bounds before anything is written, `check_types` names a hand edit
of config.json at load, `upgrade` gives an old run's config.json the value
its run had, and the workdir checks (`SHAPE_KEYS`, `STREAM_KEYS`) follow the
field's flags. The package is the bottom of the layering (it imports only
errors.py, and no JAX), so every layer above reads the same table.
"""
import copy
import dataclasses

from moe_jax.schema import data, field, model, run, train, upcycle

# name -> its dataclass, in config.json's order; '' is the top level.
GROUPS = {'': run.RunConfig, 'model': model.ModelConfig, 'moe': model.MoEConfig,
          'opt': train.OptConfig, 'data': data.DataConfig, 'ckpt': run.CkptConfig,
          'mesh': run.MeshConfig, 'upcycle': upcycle.UpcycleConfig,
          'phases': train.PhasesConfig}


def fields():
  """(dotted key, field) of every key of every group, nested groups left out."""
  for name, cls in GROUPS.items():
    for f in dataclasses.fields(cls):
      if not dataclasses.is_dataclass(field.default(f)):
        yield (f'{name}.{f.name}' if name else f.name), f


def _flagged(flag):
  return tuple(key for key, f in fields() if f.metadata.get(flag))


# A workdir is refused when its saved config differs in a key that changes
# parameter shapes (or, as norm_position, what the same params compute), and,
# once it has trained, in a key that fixes the data stream a resumed run must
# continue exactly (with the source's own keys: data/sources/).
SHAPE_KEYS = _flagged('shape')
STREAM_KEYS = _flagged('stream')
NUMERICS_KEYS = _flagged('numerics')   # what a merge's sources may differ in


def added():
  """{dotted key: the value runs before the key had} of every key added after
  the trainer's first run (7520b85)."""
  return {key: f.metadata['added'] for key, f in fields() if 'added' in f.metadata}


def upgrade(record):
  """`record`, a config as a dict, with each added key it lacks set to the
  value runs had before the key existed (in place; returned). A config read
  from disk is upgraded once, where it is read: config.json
  (workdir/files.read_config_record) and a checkpoint's meta
  (workdir/checkpoint.Manager.restore). The upcycle group's keys that became
  a recipe's args move there (upcycle.upgrade_recipe_args)."""
  for dotted, value in added().items():
    *groups, key = dotted.split('.')
    node = record
    for group in groups:
      node = node.setdefault(group, {})
    node.setdefault(key, copy.deepcopy(value))
  return upcycle.upgrade_recipe_args(record)


def check(config, groups=None):
  """A one-line ConfigError naming the first key of `config` (a ConfigDict or
  dict) past its field's bounds or choices, or of another type; in the
  `groups` named only, if given."""
  for name, cls in GROUPS.items():
    if groups is None or name in groups:
      field.check(name, config[name] if name else config, cls)


def check_types(record, path):
  """A one-line ConfigError naming `path` and the first key of `record` (a
  config as a dict read from `path`, upgraded) that is missing or of another
  type than its field.

  config.json is a file a person may edit: a key deleted, `top_k: "2"`, a
  `null`, `64.0` for a count. Read as it is, such a value fails far from its
  cause (a TypeError in the model, a shape error in jit); files.read_config_record,
  which main, evaluate, generate, upcycle and export all read a workdir's
  config through, checks it here and names the key.
  """
  for name, cls in GROUPS.items():
    field.check_types(name, record[name] if name else record, cls, path)
