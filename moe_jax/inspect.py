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
goes to --plot; without it only the table prints: a read-only command writes
nothing under its inputs unless told where, and never over an existing file
(unless --overwrite), nor anywhere in a workdir but a new file directly in
the one it reads (moe_jax/containment.py).
"""
import os

from absl import flags

from moe_jax import cli, containment
from moe_jax.errors import ConfigError
from moe_jax.eval import norms, restore, routing
from moe_jax.workdir import checkpoint



def inspect_norms(ckpts, plot_path=''):
  """(table text, plot path or '') of the layer-wise norms of `ckpts`; the
  plot is written only to a `plot_path` given."""
  loaded = [restore.load(c) for c in ckpts]
  # '<run>@<step>'; one run name in two sweeps: the step directories.
  labels = [f'{os.path.basename(os.path.dirname(os.path.dirname(l.path)))}@{l.step}'
            for l in loaded]
  if len(set(labels)) < len(labels):
    labels = [l.path for l in loaded]
  by_label = {label: norms.layer_norms(l.params) for label, l in zip(labels, loaded)}
  path = norms.plot(by_label, plot_path) if plot_path else ''
  return norms.table(by_label), path


def run(ckpts, norms_mode=False, plot_path='', routing_mode=False, batches=None,
        overwrite=False):
  if norms_mode == routing_mode:
    raise ConfigError('pass exactly one of --norms and --routing')
  if plot_path and not plot_path.lower().endswith('.png'):
    raise ConfigError(f'--plot={plot_path} must end in .png')
  if plot_path:   # a new file (moe_jax/containment.py), inside a workdir at most, never over one
    beside = [(os.path.dirname(checkpoint.resolve(c)[0]), '--ckpt', 'workdir') for c in ckpts]
    for path in [plot_path] + ([os.path.splitext(plot_path)[0] + '.json'] if routing_mode else []):
      containment.output_file(path, '--plot', overwrite, beside=beside)   # --routing's .json too
  if norms_mode:
    text, path = inspect_norms(ckpts, plot_path)
  else:
    if len(ckpts) != 1:
      raise ConfigError(f'--routing takes one --ckpt, got {len(ckpts)}')
    checkpoint.resolve(ckpts[0])   # a one-line error for a path that is no checkpoint
    text, path, _ = routing.inspect_checkpoint(ckpts[0], batches, plot_path)
  return f'{text}\nplot: {path or "none (pass --plot=PNG to write one)"}'


def define_flags():
  """The command line; defined only when run as a program, so tests import
  this module beside other entry points without clashing flags."""
  flags.DEFINE_multi_string('ckpt', None, 'Workdir or checkpoint step directory '
                            '(repeat to compare norms).')
  flags.DEFINE_bool('norms', False, 'Layer-wise weight norms.')
  flags.DEFINE_bool('routing', False, 'Routing by token type.')
  flags.DEFINE_integer('batches', None, 'Validation batches to route.')
  flags.DEFINE_string('plot', '', 'PNG path (default: no plot).')
  flags.DEFINE_bool('overwrite', False, 'Replace an existing --plot.')
  flags.mark_flag_as_required('ckpt')


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  print(cli.run_reporting_errors(run, f.ckpt, f.norms, f.plot, f.routing, f.batches,
                                 f.overwrite))


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
