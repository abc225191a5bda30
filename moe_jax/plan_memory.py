r"""The memory report of a config's train step: `python -m moe_jax.plan --memory`.

  python -m moe_jax.plan --memory --config=configs/NAME.py[:ARG] [--config.KEY=VALUE ...]
      [--batch_per_device=N] [--device_memory=80GB]

Prints one JSON line: bytes per device of params, optimizer state, batch,
temporaries and total, and with --device_memory the largest batch per device
that fits (moe_jax/train/memory.py says how). Compiles ahead of time on this
backend with abstract inputs: nothing is allocated, so any preset works on CPU.
"""

from absl import flags
from ml_collections import config_flags

from moe_jax import cli
from moe_jax import xla_flags
from moe_jax.train import memory

_MEMORY = flags.DEFINE_bool('memory', False, 'Print the memory report (this command).')
_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file (get_config(arg)).')
_BATCH = flags.DEFINE_integer('batch_per_device', None, 'Rows per device (default: the '
                              "config's batch_size over the batch shards).")
_DEVICE_MEMORY = flags.DEFINE_string('device_memory', None, 'Bytes a device has, with a '
                                     'unit (80GB, 24GiB): report the largest batch that fits.')
flags.mark_flags_as_required(['config'])


def _report():
  xla_flags.for_remat(_CONFIG.value.model.remat)   # as moe_jax.main runs it
  device_memory = (None if _DEVICE_MEMORY.value is None
                   else memory.parse_bytes(_DEVICE_MEMORY.value))
  return memory.report(_CONFIG.value, _BATCH.value, device_memory)


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  cli.print_json_result(_report)


if __name__ == '__main__':
  cli.run_app(main)
