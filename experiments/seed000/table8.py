r"""Seed 000 Table 8 and §5.3.2 at CPU scale: expert and router heuristics, and
whether the loss right after upcycling predicts the terminal loss.

  python -m experiments.launch --config=experiments/seed000/table8.py --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=8 --workdir=DIR

One CPT budget, 50% (T = 30 u, tau = 20 u; experiments/seed000/base.py): the
Fixed-E run's state at tau grown E -> 2E with every expert copied once, its
replicas changed by each expert heuristic of Table 9 (`expert=NAME`) or its
router columns by each router heuristic of Table 10 (`router=NAME`), each at
its default variant (moe_jax/upcycle/heuristics.py); and by the four utility
allocations (`utility=METRIC`). `fixed` and `fixed2x` are T-step runs. The
report ranks the initial loss (validation, from the transition's report;
training, the first logged step after tau) against the terminal loss over all
heuristic and utility runs (Spearman's rho; the seed: 0.80 and 0.86, n = 65).
`:small`: two expert heuristics and one router heuristic (CI).
"""
from experiments.seed000 import base
from moe_jax.upcycle import heuristics, utility

EXPERT = tuple(n for n in heuristics.EXPERT if n != 'random')   # Table 9's ten
ROUTER = tuple(heuristics.ROUTER)                              # Table 10's ten


def _arg(arg):
  return base.parse(arg)


def rows(arg=None):
  """{kind: [(name, run)]} for kind in expert, router, utility ('copy' is shared)."""
  small = _arg(arg).small
  expert = ('copy', 'scaled_copy') if small else EXPERT
  router = ('copy_noise',) if small else tuple(n for n in ROUTER if n != 'copy')
  metrics = () if small else utility.METRICS
  return {'expert': [(n, f'expert={n}') for n in expert],
          'router': [('copy', 'expert=copy')] + [(n, f'router={n}') for n in router],
          'utility': [(m, f'utility={m}') for m in metrics]}


def get_config(arg=None):
  config = base.config(_arg(arg))
  config.upcycle.args.allocation = 'uniform'
  return config


def get_hyper(h, arg=None):
  u = base.unit(_arg(arg))
  tau, total, e = 20 * u, 30 * u, get_config(arg).moe.num_experts
  d = base.decay_steps(total, tau)
  own = {'config.total_steps': total, 'config.opt.decay_fraction': d / total}
  points = [dict(own, name='fixed'), dict(own, name='fixed2x', **{'config.moe.num_experts': 2 * e})]
  table = rows(arg)
  for kind, key in (('expert', 'upcycle.args.expert_heuristic'),
                    ('router', 'upcycle.args.router_heuristic')):
    for name, run in table[kind]:
      if kind == 'router' and name == 'copy':
        continue   # the expert=copy run
      points.append(base.upcycled(h, 'fixed', tau, total, run, {key: name}))
  for metric, run in table['utility']:
    points.append(base.upcycled(h, 'fixed', tau, total, run, {
        'upcycle.args.allocation': 'utility', 'upcycle.args.utility_metric': metric}))
  return points
