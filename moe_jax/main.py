r"""Train or continue a model.

  python -m moe_jax.main --config=configs/NAME.py[:ARG] --workdir=DIR [--config.KEY=VALUE ...]

Resumes from the newest checkpoint in DIR when there is one.
"""
from absl import flags
from ml_collections import config_flags

from moe_jax import cli
from moe_jax.train import trainer

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file (get_config(arg)).')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Run directory: config, checkpoints, metrics.')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  last = cli.run_reporting_errors(trainer.train_and_evaluate, _CONFIG.value, _WORKDIR.value)
  if 'val_loss' in last:
    print(f'val_loss {last["val_loss"]:.4f} nats/token (unigram entropy of the validation '
          f'split: {last["val_unigram_entropy"]:.4f})')


if __name__ == '__main__':
  cli.run_app(main)
