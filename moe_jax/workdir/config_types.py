"""Every key of a run's config.json there, and of its field's type, checked
where the file is read.

config.json is a file a person may edit: a key deleted, `top_k: "2"`, a
`null`, `64.0` for a count. Read as it is, such a value fails far from its
cause (a TypeError in the model, a shape error in jit). files.read_config_record,
which main, evaluate, generate, upcycle and export all read a workdir's config
through, checks it against the typed groups' fields here and names the key.
The `opt` and `upcycle` groups sit above workdir/ and are checked by the code
that reads them (train/optimizer.py, upcycle/transition.py).
"""
from moe_jax import config_group
from moe_jax.data import config as data_config
from moe_jax.models import config as model_config
from moe_jax.workdir import config as workdir_config

# (group, its dataclass); '' is the top level.
GROUPS = (('', workdir_config.RunConfig), ('model', model_config.ModelConfig),
          ('moe', model_config.MoEConfig), ('data', data_config.DataConfig),
          ('ckpt', workdir_config.CkptConfig), ('mesh', workdir_config.MeshConfig))


def check(record, path):
  """A one-line ConfigError naming `path` and the first key of `record` (a
  config as a dict, upgraded) that is missing or of another type than its field."""
  for name, cls in GROUPS:
    config_group.check_types(name, record[name] if name else record, cls, path)
