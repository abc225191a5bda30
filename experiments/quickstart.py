r"""Seed 000's comparison at toy scale: Fixed-E, Upcycled E->2E at tau, Fixed-2E
and a sparse-upcycled dense run, one token budget, one table.

  python -m experiments.quickstart --workdir=/tmp/moe_jax_quickstart [--steps=600]

Each run lives in WORKDIR/<run> (configs/quickstart.py:<run>) and resumes if
interrupted; the table goes to stdout and WORKDIR/quickstart.json.
"""
import json
import os
import time

from absl import flags

from configs import quickstart
from moe_jax import cli
from moe_jax.scaling_laws import cost
from moe_jax.train import trainer

_WORKDIR = flags.DEFINE_string('workdir', '/tmp/moe_jax_quickstart', 'Where the runs go.')
_STEPS = flags.DEFINE_integer('steps', 600, 'Steps of every run (tau is half of it).')


def _report(workdir):
  path = os.path.join(workdir, 'upcycle_report.json')
  if not os.path.exists(path):
    return ''
  with open(path) as f:
    r = json.load(f)
  return f'at tau: {r["loss_before"]:.3f} -> {r["loss_after"]:.3f}'


def main(argv):
  del argv
  results = {}
  for name in quickstart.RUNS:
    config = quickstart.get_config(f'{name},steps={_STEPS.value}')
    workdir = os.path.join(_WORKDIR.value, name)
    print(f'== {name}: {quickstart.describe(config)}', flush=True)
    t0 = time.perf_counter()
    last = cli.run_reporting_errors(trainer.train_and_evaluate, config, workdir)
    results[name] = dict(val_loss=last['val_loss'], seconds=time.perf_counter() - t0,
                         transition=_report(workdir))
  entropy = last['val_unigram_entropy']
  print(f'\n{"run":<14}{"val_loss":>10}  notes')
  for name, r in results.items():
    print(f'{name:<14}{r["val_loss"]:>10.4f}  {r["transition"]}')
  print(f'{"unigram":<14}{entropy:>10.4f}  entropy of the validation split (nats/byte)')
  fixed, up, fixed2x = (results[n]['val_loss'] for n in ('fixed', 'upcycled', 'fixed2x'))
  eta = None
  if fixed > fixed2x:
    eta = cost.efficiency(fixed, up, fixed2x)
    print(f'\nupcycling efficiency eta (seed 000 eq. 4) = {eta:.3f}  '
          '(1: the upcycled run matches Fixed-2E; 0: no better than Fixed-E)')
  else:  # eq. 4 divides by this gap; with its sign flipped eta means nothing
    print(f'\neta (seed 000 eq. 4) is undefined here: Fixed-2E ({fixed2x:.4f}) did not beat '
          f'Fixed-E ({fixed:.4f}) at this budget, so there is no gap to close; try more --steps')
  with open(os.path.join(_WORKDIR.value, 'quickstart.json'), 'w') as f:
    json.dump(dict(runs=results, unigram_entropy=entropy, eta=eta), f, indent=2)


if __name__ == '__main__':
  cli.run_app(main)
