r"""Seed 000 Table 3 at CPU scale: when to upcycle (a) and how much CPT (b).

  python -m experiments.launch --config=experiments/seed000/table3.py --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=3 --workdir=DIR

Steps in units u (experiments/seed000/base.py): T_max = 40 u, ||g||^2
utility-based duplication E -> 2E, one seed (as the seed's Table 3).
  (a) T = T_max fixed; the transition at tau / T = 0.05 ... 0.5 (`a_tau=STEP`):
      the Fixed-E run grown at tau and trained to T; `fixed` and `fixed2x`
      are the bounds of every row.
  (b) tau = 20 u fixed; CPT = T - tau = 10% ... 100% of tau (`b_*_T=STEP`):
      Fixed-E and Fixed-2E decayed at T, and the Fixed-E run grown at tau and
      trained to T. The 100% row is (a)'s tau / T = 0.5 row and the long runs.
`:small`: one row of (a) and (b)'s 100% row (the same three runs), a tiny
model, u = 1 (CI); the other rows of (b), decay branches of the long runs,
are checked at full size by tests/experiments/test_seed000.py.
"""
from experiments.seed000 import base

TAU_FRACTIONS = (0.05, 0.125, 0.25, 0.375, 0.5)   # of T
CPT_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)       # of tau


def _arg(arg):
  return base.parse(arg)


def rows(arg=None):
  """(a) [(tau, run)], (b) [(CPT steps, (Fixed-E run, Upcycled run, Fixed-2E run))]."""
  a = _arg(arg)
  u = base.unit(a)
  t_max, tau = 40 * u, 20 * u
  taus = (0.5,) if a.small else TAU_FRACTIONS
  cpts = (1.0,) if a.small else CPT_FRACTIONS
  part_a = [(round(f * t_max), f'a_tau={round(f * t_max)}') for f in taus]
  part_b = []
  for f in cpts:
    total = tau + round(f * tau)
    names = (('fixed', f'a_tau={tau}', 'fixed2x') if total == t_max else
             tuple(f'b_{arm}_T={total}' for arm in ('fixed', 'up', 'fixed2x')))
    part_b.append((total - tau, names))
  return part_a, part_b


def get_config(arg=None):
  return base.config(_arg(arg))


def get_hyper(h, arg=None):
  a = _arg(arg)
  u = base.unit(a)
  t_max, tau, e = 40 * u, 20 * u, get_config(arg).moe.num_experts
  points = [{'name': 'fixed'}, {'name': 'fixed2x', 'config.moe.num_experts': 2 * e}]
  part_a, part_b = rows(arg)
  for t, name in part_a:
    points.append(base.upcycled(h, 'fixed', t, t_max, name))
  for cpt, (fixed, up, fixed2x) in part_b:
    total = tau + cpt
    if total == t_max:
      continue
    points += [base.fixed(h, 'fixed', total, tau, fixed),
               base.upcycled(h, 'fixed', tau, total, up),
               dict(base.fixed(h, 'fixed2x', total, tau, fixed2x),
                    **{'config.moe.num_experts': 2 * e})]
  return points
