r"""Look inside checkpoints without training: print a table and write a plot.

  python -m moe_jax.inspect --ckpt=CKPT [--ckpt=CKPT2 ...] --norms [--plot=PNG]
  python -m moe_jax.inspect --ckpt=CKPT --routing [--batches=N] [--plot=PNG]

--norms    layer-wise weight norms (moe_jax/eval/norms.py; seed 003 Fig. 2):
           per layer, the mean matrix norm of attention, FFN (experts), router
           and norm weights; several --ckpt share one table and one plot.
--routing  routing by token type (moe_jax/eval/routing.py; seed 001): per MoE
           layer, the share of each token group's top-k assignments per
           expert (a table and a heatmap), then the load CV and dead experts
           the run logged over training. Also writes routing.json beside the
           plot. --batches validation batches are analysed (default: the
           config's eval_batches).

CKPT is a workdir (its newest checkpoint) or one step directory. The plot
goes to --plot, by default `plots/<mode>.png` in the first CKPT's workdir.
"""
import os

from absl import app, flags

from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.eval import norms, restore, routing
from moe_jax.workdir import checkpoint

_CKPT = flags.DEFINE_multi_string('ckpt', None, 'Workdir or checkpoint step directory '
                                  '(repeat to compare norms).')
_NORMS = flags.DEFINE_bool('norms', False, 'Layer-wise weight norms.')
_ROUTING = flags.DEFINE_bool('routing', False, 'Routing by token type.')
_BATCHES = flags.DEFINE_integer('batches', None, 'Validation batches to route.')
_PLOT = flags.DEFINE_string('plot', '', 'PNG path (default: <workdir>/plots/<mode>.png).')
flags.mark_flag_as_required('ckpt')


def _default_plot(ckpt, mode):
  directory, _ = checkpoint.resolve(ckpt)
  return os.path.join(os.path.dirname(directory), 'plots', f'{mode}.png')


def inspect_norms(ckpts, plot_path=''):
  """(table text, plot path) of the layer-wise norms of `ckpts`."""
  loaded = [restore.load(c) for c in ckpts]
  # '<run>@<step>'; one run name in two sweeps: the step directories.
  labels = [f'{os.path.basename(os.path.dirname(os.path.dirname(l.path)))}@{l.step}'
            for l in loaded]
  if len(set(labels)) < len(labels):
    labels = [l.path for l in loaded]
  by_label = {label: norms.layer_norms(l.params) for label, l in zip(labels, loaded)}
  path = norms.plot(by_label, plot_path or _default_plot(ckpts[0], 'norms'))
  return norms.table(by_label), path


def run(ckpts, norms_mode=False, plot_path='', routing_mode=False, batches=None):
  if norms_mode == routing_mode:
    raise ConfigError('pass exactly one of --norms and --routing')
  if plot_path and not plot_path.lower().endswith('.png'):
    raise ConfigError(f'--plot={plot_path} must end in .png')
  if norms_mode:
    text, path = inspect_norms(ckpts, plot_path)
  else:
    if len(ckpts) != 1:
      raise ConfigError(f'--routing takes one --ckpt, got {len(ckpts)}')
    checkpoint.resolve(ckpts[0])   # a one-line error for a path that is no checkpoint
    text, path, _ = routing.inspect_checkpoint(ckpts[0], batches, plot_path)
  return f'{text}\nplot: {path}'


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  print(cli.run_reporting_errors(run, _CKPT.value, _NORMS.value, _PLOT.value,
                                 _ROUTING.value, _BATCHES.value))


if __name__ == '__main__':
  cli.run_app(main)
