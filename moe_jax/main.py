r"""Train or continue a model.

  python -m moe_jax.main --config=configs/NAME.py[:ARG] --workdir=DIR [--config.KEY=VALUE ...]
  python -m moe_jax.main --workdir=DIR [--config.KEY=VALUE ...]

Resumes from the newest checkpoint in DIR when there is one. Without --config,
DIR goes on from its own config.json (a run, an upcycled or imported workdir),
and --config.KEY=VALUE changes any key that keeps the parameter shapes, e.g.
--config.total_steps=600. Every key, its default and what it does: the
dataclasses configs/common.py names; a config file's own docstring holds its
command.
"""
from absl import flags
from ml_collections import config_flags

from moe_jax import cli
from moe_jax import xla_flags
from moe_jax.train import trainer
from moe_jax.workdir import saved_config


def define_flags():
  """The command line; defined only when run as a program, so importing this
  module beside another entry point defines no clashing flags."""
  config_flags.DEFINE_config_file(
      'config', None, 'Config file (get_config(arg)); its keys are those of configs/common.py, '
      'each overridable as --config.KEY=VALUE. Leave out to continue --workdir from its '
      'config.json.')
  flags.DEFINE_string('workdir', None, 'Run directory: config, checkpoints, metrics.')
  flags.mark_flags_as_required(['workdir'])


def main(argv):
  # cli.run_app refuses positional arguments; without --config, argv[1:] are its overrides.
  config, workdir = flags.FLAGS.config, flags.FLAGS.workdir
  if config is None:
    config = cli.run_reporting_errors(saved_config.load, workdir, argv[1:])
  xla_flags.for_remat(config.model.remat)   # before any backend starts; the summary says so
  last = cli.run_reporting_errors(trainer.train_and_evaluate, config, workdir)
  if 'val_loss' in last:
    print(f'val_loss {last["val_loss"]:.4f} nats/token (unigram entropy of the validation '
          f'split: {last["val_unigram_entropy"]:.4f})')


if __name__ == '__main__':
  define_flags()
  cli.run_app(main, overrides_without_config=True)
