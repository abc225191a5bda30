r"""Grow a checkpoint into a new workdir.

  python -m moe_jax.upcycle --config=configs/upcycle/NAME.py[:ARG] --src=CKPT --dst=DIR [--overwrite]
  python -m moe_jax.upcycle --config=configs/upcycle/merge.py --src=CKPT,CKPT[,...] --dst=DIR

CKPT is a workdir (its newest checkpoint) or a checkpoint step directory. DIR
becomes a workdir whose step-0 checkpoint holds the grown params:
`python -m moe_jax.main --workdir=DIR` trains it on (its own config.json) and
`python -m moe_jax.evaluate --ckpt=DIR` evaluates it. Prints the
function-preservation report (loss before and after, max |delta logits|) as
one JSON line; DIR/upcycle_report.json keeps it. A several-source recipe
(merge) reads comma-separated sources and reports each on its own data
(moe_jax/upcycle/run.py).
"""
import json

from absl import flags
from ml_collections import config_flags

from moe_jax import cli
from moe_jax.upcycle import run

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Upcycle config (an `upcycle` group: its keys and defaults are '
    'configs/common.py:upcycle(), each overridable as --config.KEY=VALUE).')
_SRC = flags.DEFINE_string('src', None, 'Source workdir or checkpoint step directory '
                           '(a several-source recipe such as merge: comma-separated).')
_DST = flags.DEFINE_string('dst', None, 'New workdir for the grown model.')
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace an existing --dst.')
flags.mark_flags_as_required(['config', 'src', 'dst'])


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  report = cli.run_reporting_errors(run.upcycle_checkpoint, _CONFIG.value, _SRC.value,
                                    _DST.value, _OVERWRITE.value)
  print(json.dumps({k: v for k, v in report.items() if k != 'recipe'}))


if __name__ == '__main__':
  cli.run_app(main)
