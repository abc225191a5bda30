r"""Seed 000 Table 5 at CPU scale: activation ratio, expert vs sparse upcycling,
at top-1 (the seed's setting) beside top-2.

  python -m experiments.launch --config=experiments/seed000/table5.py --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=5 --workdir=DIR

The quickstart's model and schedule (configs/quickstart.py: T = `steps` =
2250, tau = T/2, WSD) with uniform duplication, for each top-k in `top_k`
('+'-separated; default 1+2), each seed and each target 2E of `experts`
E = 4, 8, 16, 32 (the seed's four rows, K/E = 25% ... 3.1% at top-2):
  k{k}_s{s}_moe_E      Fixed-E and Fixed-2E: `moe_{n}` trained T steps from scratch
  k{k}_s{s}_up_E       expert upcycling: moe_E's state at tau grown to 2E
                       (expand_experts in the run) and trained to T
  k{k}_s{s}_sparse_2E  sparse upcycling: the dense run's state at tau (MLP width
                       of one expert) grown to 2E exact copies (dense_to_moe in
                       the run) and trained to T
The dense run `s{s}_dense` is shared by every row and top-k of a seed. At
top-1 with renormalised gates the E -> 2E copies are function-preserving if
the router's selection biases (loss-free balancing) are halved with the
softmax scores the copies split, so top-1 rows set upcycle.args.split_bias (exact
up to the replicas' U(-delta, delta) bias noise, which can flip near-ties:
tests/upcycle/test_preservation.py); at top-2 copies are not preserving
(they tie and push out the next-best expert), and top-2 rows keep the
recipe's defaults, so the quickstart's four arms have the configs and seeds
of this sweep's top-2, E = 8 row. The committed files of the two ran at
different commits and differ by up to 0.013 nats per run
(docs/rerun_drift.md): they are compared through their seed intervals,
never run by run.

`first_seed` (default 0) starts the seeds there: seeds first_seed ..
first_seed + seeds - 1, the names `k{k}_s{s}_...` of those seeds.

Issue 71's run, its settings fixed here before it was launched: top-1 on the
paper's four activation ratios, K/2E = 25 %, 12.5 %, 6.25 % and 3.12 %
(E = 2, 4, 8, 16), at T = 4500, tau = 2250, seeds 3-8:

  python -m experiments.launch \
      --config=experiments/seed000/table5.py:top_k=1,steps=4500,experts=2+4+8+16,first_seed=3,seeds=6 \
      --workdir=DIR --parallel=1
  python -m experiments.seed000.report --table=5 --workdir=DIR \
      --arg=top_k=1,steps=4500,experts=2+4+8+16,first_seed=3,seeds=6

T = 4500 is the setting seed 0's one-seed probe chose on 2026-11-28
(docs/seed000.md, "Table 5 at top-1 where 2E beats E"); it is fixed here
for seeds that played no part in choosing it (seeds 1-2 ran at it after the
choice; 3-8 have not run at all). 84 runs. Cost, from
docs/seed000/table5_top1_T4500.json's wall_s (two runs at a time beside
other jobs): per seed about 5 Fixed runs of 4,500 steps at 250-300 s, the
dense run at ~150 s and 8 branches of 2,250 steps at 140-170 s, ~2,900 s,
so 6 seeds are ~17,000 s (4.8 hours) of run time, up to twice that when the
machine is shared (that file's 16,054 s for 42 runs held 1,000 s runs).

The issue-22 run of 2026-11-23 (top-2, one seed, T = 1600, tau = 800) is
`:top_k=2,seeds=1,steps=1600`. `:small` is two top-ks, one seed, E = 2, 20
steps of a tiny model (CI).
"""
from configs import quickstart
from experiments.seed000 import base

EXPERTS = (4, 8, 16, 32)   # E; targets 2E


def _arg(arg):
  a = base.parse(arg, top_k='1+2', steps=2250, experts='+'.join(map(str, EXPERTS)),
                 first_seed=0)
  if a.small:
    a.update(steps=20, seeds=1, experts='2')
  return a


def _ints(text):
  return tuple(int(x) for x in str(text).split('+') if x)


def top_ks(arg=None):
  return _ints(_arg(arg).top_k)


def rows(arg=None):
  """[(top_k, seed, E, {column: run name})], columns fixed, fixed2x, upcycled, sparse."""
  a = _arg(arg)
  return [(k, s, e, dict(fixed=f'k{k}_s{s}_moe_{e}', fixed2x=f'k{k}_s{s}_moe_{2 * e}',
                         upcycled=f'k{k}_s{s}_up_{e}', sparse=f'k{k}_s{s}_sparse_{2 * e}'))
          for k in _ints(a.top_k) for s in range(a.first_seed, a.first_seed + a.seeds)
          for e in _ints(a.experts)]


def get_config(arg=None):
  """The quickstart's run of `steps` steps, checkpoints at tau kept;
  upcycle.args empty: expand_experts duplicates uniformly and dense_to_moe
  copies, their recipes' defaults (one config holds both transitions)."""
  a = _arg(arg)
  config = quickstart.get_config('small' if a.small else f'steps={a.steps}')
  tau = a.steps // 2
  config.update(total_steps=a.steps, checkpoint_every_steps=tau)
  config.ckpt.keep_every = tau
  return config


def get_hyper(h, arg=None):
  a = _arg(arg)
  tau = a.steps // 2
  points, trained = [], set()
  branch = {'config.upcycle.step': tau, 'config.ckpt.keep_every': 0}
  for k, s, e, names in rows(arg):
    for n, name in ((e, names['fixed']), (2 * e, names['fixed2x'])):
      if name not in trained:
        trained.add(name)
        points.append({'name': name, 'config.seed': s, 'config.moe.top_k': k,
                       'config.moe.num_experts': n})
    if f's{s}_dense' not in trained:
      trained.add(f's{s}_dense')
      points.append({'name': f's{s}_dense', 'config.seed': s, 'config.moe.num_experts': 0})
    common = dict(branch, **{'config.seed': s, 'config.moe.top_k': k,
                             'config.upcycle.target.moe.num_experts': 2 * e})
    points.append(dict(common, name=names['upcycled'], resume_from=h.run(
        names['fixed'], step=tau), **{'config.moe.num_experts': e,
                                      'config.upcycle.recipe': 'expand_experts',
                                      # the whole args: the config's hold none
                                      **({'config.upcycle.args': {'split_bias': True}}
                                         if k == 1 else {})}))
    points.append(dict(common, name=names['sparse'], resume_from=h.run(
        f's{s}_dense', step=tau), **{'config.moe.num_experts': 0,
                                     'config.upcycle.recipe': 'dense_to_moe'}))
  return points
