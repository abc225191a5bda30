r"""Evaluate a checkpoint; prints one JSON line with val_loss, val_tokens, step.

  python -m moe_jax.evaluate --ckpt=CKPT [--config=configs/NAME.py[:ARG]] [--batches=N]

CKPT is a workdir (its newest checkpoint) or one step directory. Without
--config, the workdir's config.json is used.
"""
import json

from absl import flags
from ml_collections import config_flags

from moe_jax import cli
from moe_jax.eval import validation

_CKPT = flags.DEFINE_string('ckpt', None, 'Workdir or checkpoint step directory.')
_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file; default: the workdir\'s.')
_BATCHES = flags.DEFINE_integer('batches', None, 'Validation batches (0: the whole split).')
flags.mark_flag_as_required('ckpt')


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  result = cli.run_reporting_errors(validation.evaluate_checkpoint, _CKPT.value, _CONFIG.value,
                                    _BATCHES.value)
  print(json.dumps(result))


if __name__ == '__main__':
  cli.run_app(main)
