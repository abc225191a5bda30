r"""Seed 001's two comparisons over seeds: three phases vs one after dense ->
MoE, and the upcycled MoE vs one from scratch at equal MoE steps and at equal
total steps.

  python -m experiments.launch --config=experiments/seed001/seeds.py[:seeds=3] --workdir=DIR --parallel=2
  python -m experiments.seed001.report --study=seeds --workdir=DIR

Per seed s (config.seed: the init of every run and the dense run's data
order): `dense_s{s}`, `up_single_s{s}` and `up_three_phase_s{s}` grown from
it, `scratch_s{s}` (DENSE + UP steps) and `scratch_up_s{s}` (UP steps, the
MoE steps of the upcycled runs), as experiments/seed001/common.py defines
them. The report pairs runs by seed. `:small` is CI's few steps, one seed.
"""
from experiments.seed001 import common

def _arg(arg):
  """`seeds` [3], and the other sweeps' `small` (one seed then)."""
  a = common.family.parse(arg, seeds=3)
  return 'small' if a.small else '', 1 if a.small else a.seeds


def get_config(arg=None):
  return common.get_config(_arg(arg)[0])


def get_hyper(h, arg=None):
  small, seeds = _arg(arg)
  s = common.steps(small)
  out = []
  for seed in range(seeds):
    dense = f'dense_s{seed}'
    runs = [dict(common.dense(s), name=dense),
            common.upcycled(h, s, f'up_single_s{seed}', False, src=dense),
            common.upcycled(h, s, f'up_three_phase_s{seed}', True, src=dense),
            common.scratch(s, f'scratch_s{seed}'),
            common.scratch(s, f'scratch_up_s{seed}', total=s['up'])]
    out += [dict(run, **{'config.seed': seed}) for run in runs]
  return out
