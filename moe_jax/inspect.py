r"""Look inside checkpoints without training: print a table and write a plot.

  python -m moe_jax.inspect --ckpt=CKPT --routing [--batches=N] [--plot=PNG]

--routing  routing by token type (moe_jax/eval/routing.py; seed 001): per MoE
           layer, the share of each token group's top-k assignments per
           expert (a table and a heatmap), then the load CV and dead experts
           the run logged over training. Also writes routing.json beside the
           plot.

CKPT is a workdir (its newest checkpoint) or one step directory; --batches
validation batches are analysed (default: the config's eval_batches). The
plot goes to --plot, by default `plots/routing.png` in CKPT's workdir.
"""
from absl import app, flags

from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.eval import routing
from moe_jax.workdir import checkpoint

_CKPT = flags.DEFINE_string('ckpt', None, 'Workdir or checkpoint step directory.')
_ROUTING = flags.DEFINE_bool('routing', False, 'Routing by token type.')
_BATCHES = flags.DEFINE_integer('batches', None, 'Validation batches to route.')
_PLOT = flags.DEFINE_string('plot', '', 'PNG path (default: <workdir>/plots/<mode>.png).')
flags.mark_flag_as_required('ckpt')


def run(ckpt, routing_mode, batches, plot_path):
  if not routing_mode:
    raise ConfigError('nothing to inspect: pass --routing')
  checkpoint.resolve(ckpt)   # a one-line error for a path that is no checkpoint
  text, path, _ = routing.inspect_checkpoint(ckpt, batches, plot_path)
  return f'{text}\nplot: {path}'


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  print(cli.run_reporting_errors(run, _CKPT.value, _ROUTING.value, _BATCHES.value, _PLOT.value))


if __name__ == '__main__':
  cli.run_app(main)
