r"""Fine-grained and shared-expert upcycling at CPU scale (arXiv 2410.07524).

  python -m experiments.launch --config=experiments/finegrained/study.py --workdir=DIR
  python -m experiments.finegrained.report --workdir=DIR

The main job's model (configs/quickstart.py: d_model 96, MLP width 64) trained
dense for DENSE steps, then upcycled by recipe finegrained (configs/upcycle/
finegrained.py) and trained UP more steps, SEEDS seeds each; a seed draws the
router (upcycle.seed) and the data order (config.seed), shared by the arms of
that seed, so arms are compared paired by seed. For G in GRANULARITIES:

  g{G}                8 copies x G = 8G experts of width 64/G, top-2G,
                      softmax_then_topk without renormalisation (the paper's
                      router), a zero router so that weight scaling (wo x 8G/2)
                      is exact at step 0
  g{G}_shared         one shared expert (the MLP, carrying half the output) and
                      7 copies x G, top-G: as many active (2 MLPs) and total
                      (8 MLPs) expert parameters as g{G}
  g{G}_topk_softmax   g{G} with Mixtral's topk_then_softmax (renormalised gates,
                      wo x G, a N(0, 2/(5 d_model)) router: exact at step 0)

Every upcycled arm has the same active and total expert parameters and reads
the same UP x batch tokens; routers differ (D x 8G weights, a selection bias
per expert: moe.use_bias as in the main job). The report grades the paper's
"higher granularity helps" (g2, g4 against g1, with and without the shared
expert) and "softmax-then-top-k beats top-k-then-softmax" (g{G} against
g{G}_topk_softmax) on the final validation loss, paired over seeds with 95 %
t intervals. `:small` is a seconds-long plan for the tests.
"""
from configs import common, quickstart

SEEDS = 3
GRANULARITIES = (1, 2, 4)
DENSE, UP = 600, 300
SMALL = dict(dense=4, up=4, seeds=2, granularities=(1, 2))
EXPERTS, TOP_K = 8, 2
UPCYCLE = 'configs/upcycle/finegrained.py'
KINDS = ('', '_shared', '_topk_softmax')


def _arg(arg):
  return common.parse_arg(arg, small=False)


def plan(arg=None):
  """dict(dense, up, seeds, granularities) of the study or its `small` variant."""
  if _arg(arg).small:
    return dict(SMALL)
  return dict(dense=DENSE, up=UP, seeds=SEEDS, granularities=GRANULARITIES)


def get_config(arg=None):
  """The dense run: the main job's model with one MLP of the experts' width."""
  small = _arg(arg).small
  config = quickstart.get_config('small' if small else None)
  config.moe.num_experts = 0
  config.upcycle.target = {}
  p = plan(arg)
  config.update(total_steps=p['dense'], eval_every_steps=p['up'] // (1 if small else 3),
                checkpoint_every_steps=p['dense'], eval_batches=2 if small else 16)
  config.ckpt.keep_every = p['dense']   # the upcycled arms start from it
  return config


def arm(granularity, kind, width):
  """(upcycle config argument, the grown model's moe keys) of arm g{G}{kind}
  grown from an MLP `width` wide."""
  shared = kind == '_shared'
  order = 'topk_then_softmax' if kind == '_topk_softmax' else 'softmax_then_topk'
  experts, top_k = (EXPERTS - 1, TOP_K - 1) if shared else (EXPERTS, TOP_K)
  renormalize = order == 'topk_then_softmax'
  upcycle = (f'experts={experts},top_k={top_k},granularity={granularity},order={order},'
             f'renormalize={renormalize},router_init={"normal" if renormalize else "zero"}'
             + (',shared' if shared else ''))
  moe = dict(num_experts=experts * granularity, top_k=top_k * granularity,
             d_ff=width // granularity,
             num_shared_experts=granularity if shared else 0, order=order,
             renormalize=renormalize)
  return upcycle, moe


def run_name(granularity, kind, seed):
  return f'g{granularity}{kind}_s{seed}'


def get_hyper(h, arg=None):
  p, width = plan(arg), get_config(arg).model.d_ff
  points = [dict(name='dense')]
  for seed in range(p['seeds']):
    for g in p['granularities']:
      for kind in KINDS:
        upcycle, moe = arm(g, kind, width)
        point = {'name': run_name(g, kind, seed), 'config.seed': seed,
                 'upcycle.config': f'{UPCYCLE}:{upcycle},seed={seed}',
                 'upcycle.src': h.run('dense', step=p['dense']),
                 'config.total_steps': p['up'], 'config.checkpoint_every_steps': p['up']}
        point.update({f'config.moe.{k}': v for k, v in moe.items()})
        points.append(point)
  return points
