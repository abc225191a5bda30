r"""How far an upcycled MoE's routers and experts moved between two checkpoints.

  python -m experiments.moesturizer.parting --workdir=RUN --before=0 --after=40 \
      [--out=parting.json]

An upcycled MoE starts with E identical experts and a near-uniform router
(seed 004's eq. 3 with a small `router_std`); its gain over the dense model
needs the experts to part: the router to send different tokens to different
experts, and the experts to grow apart on them. The training metrics show
the routing (entropy, load); this shows the weights behind it. Per MoE layer
and weight: the norm at `--before`, the norm of the change and its largest
entry, and for expert weights [E, ...] the experts' spread: the root mean
square over experts of |W_e - mean_e W|, over |mean_e W| (0 for exact
copies). It also prints the sum of the learning rate over the steps between:
AdamW moves an entry by about the learning rate per update at most (weight
decay aside), so that sum is the scale an entry's change can reach.
Nothing is written except --out.
"""
import json
import os

from absl import flags
import numpy as np

from experiments import provenance
from moe_jax import atomic, cli, containment
from moe_jax.errors import ConfigError
from moe_jax.train import optimizer
from moe_jax.upcycle import paths, transition
from moe_jax.workdir import checkpoint, saved_config


def define_flags():
  flags.DEFINE_string('workdir', None, 'A run directory with both checkpoints.')
  flags.DEFINE_integer('before', 0, 'The earlier checkpoint step.')
  flags.DEFINE_integer('after', None, 'The later checkpoint step (default: the newest).')
  flags.DEFINE_string('out', None, 'Also write the rows to this JSON file.')


def movement(before, after, num_experts):
  """[row] per MoE weight of two {path: array} dicts (see the docstring)."""
  rows = []
  for name in sorted(before):
    if '/moe/' not in name:
      continue
    a, b = np.asarray(before[name], np.float64), np.asarray(after[name], np.float64)
    row = dict(param=name, shape=list(a.shape), norm=float(np.linalg.norm(a)),
               change=float(np.linalg.norm(b - a)), max_abs_change=float(np.abs(b - a).max()))
    if a.ndim == 3 and a.shape[0] == num_experts:
      spread = lambda w: float(np.linalg.norm(w - w.mean(0)) / np.sqrt(len(w))
                               / np.linalg.norm(w.mean(0)))
      row.update(spread_before=spread(a), spread_after=spread(b))
    rows.append(row)
  return rows


def parting(workdir, before, after, out):
  if not workdir:
    raise ConfigError('--workdir is required')
  if out:   # a new file, beside the run at most (moe_jax/containment.py)
    containment.output_file(out, '--out', beside=[(workdir, '--workdir', 'workdir')])
  config = saved_config.load(workdir)
  if not config.moe.num_experts:
    raise ConfigError(f'--workdir={workdir} is a dense run (moe.num_experts=0)')
  abstract = transition.abstract_params(config)
  p_before, _ = checkpoint.restore_params(os.path.join(workdir, 'checkpoints', str(before)),
                                          abstract)
  p_after, meta = checkpoint.restore_params(
      workdir if after is None else os.path.join(workdir, 'checkpoints', str(after)), abstract)
  step_after = int(meta['step'])
  lr = optimizer.schedule(config.opt, config.total_steps)
  lr_sum = float(sum(float(lr(s)) for s in range(before, step_after)))
  rows = movement(paths.flatten(p_before), paths.flatten(p_after), config.moe.num_experts)
  result = dict(before=before, after=step_after, lr_sum=lr_sum, rows=rows,
                provenance=provenance.record())
  if out:
    atomic.write_text(out, json.dumps(result, indent=1) + '\n')
  return summary(result)


def summary(result):
  """Ranges over layers, per kind of weight."""
  lines = [f'steps {result["before"]} -> {result["after"]}: sum of the learning rate '
           f'{result["lr_sum"]:.3g} (about the most AdamW moves one entry, weight decay aside)']
  kinds = sorted({r['param'].rsplit('/', 2)[-2] + '/' + r['param'].rsplit('/', 1)[-1]
                  for r in result['rows']})
  for kind in kinds:
    rows = [r for r in result['rows'] if r['param'].endswith(kind)]
    rng = lambda key: f'{min(r[key] for r in rows):.3g}-{max(r[key] for r in rows):.3g}'
    line = (f'{kind} ({len(rows)} layers): norm {rng("norm")}, change {rng("change")}, '
            f'largest entry change {rng("max_abs_change")}')
    if 'spread_after' in rows[0]:
      line += f', experts\' spread {rng("spread_before")} -> {rng("spread_after")}'
    lines.append(line)
  return '\n'.join(lines)


def main(argv):
  del argv
  f = flags.FLAGS
  print(cli.run_reporting_errors(parting, f.workdir, f.before, f.after, f.out))


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
