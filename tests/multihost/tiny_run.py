"""The trainer tests' tiny MoE as a config file, for runs in child processes.

  python -m moe_jax.multiprocess --processes=2 --devices_per_process=2 -- \
      python -m moe_jax.main --config=tests/multihost/tiny_run.py --workdir=/tmp/mp
"""
from tests.train import tiny


def get_config(arg=None):
  del arg
  return tiny.config()
