"""Expert upcycling E -> mE, top-k fixed (seed 000 Definition 3.1).

Args (defaults in brackets): allocation [uniform] | utility (scores {layer:
[E]} of utility_metric [grad_norm] | saliency | weight_norm | curvature, from
the source's gradients over utility_batches [64] training batches, the ones
training reads next: `prepare`; upcycle.utility_metric and
upcycle.utility_batches set them where the args do not), utility_allocation
[dhondt] | proportional | sampled (how scores become replica counts,
utility.py; sampled draws with upcycle.seed), layout [append] | in_place,
expert_heuristic [copy] + expert_args, router_heuristic [copy] + router_args
(heuristics.py, Tables 9 and 10), delta [0.001]: U(-delta, delta) on
replicas' router biases (needs moe.use_bias; set 0 without it), split_bias
[False]: every router bias times 1/m, since m copies split each softmax score
m ways and selection is by score + bias; with it and equal copies per expert,
top-1 with renormalised gates is exact up to delta (without it, nonzero
biases change picks: tests/upcycle/test_preservation.py). The target has
moe.num_experts x upcycle.factor. Not exact: copies tie, so a top-k slot that
went to one expert now goes to its copy and the token loses its next-best
expert.
"""
from moe_jax.errors import ConfigError
from moe_jax.upcycle import layout, ops, utility
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Rule


def _counts(src, a, multiplier):
  moe_layers = [f'layers_{i}' for i, k in enumerate(layout.layer_kinds(src)) if k == 'moe']
  utility.check_allocation(a['utility_allocation'])
  if a['allocation'] == 'uniform':
    return {layer: [multiplier] * src.moe.num_experts for layer in moe_layers}
  if a['allocation'] != 'utility':
    raise ConfigError(f"upcycle.args.allocation={a['allocation']!r} is not one of "
                      "('uniform', 'utility')")
  scores = a['scores'] or {}
  missing = [layer for layer in moe_layers if not len(scores.get(layer, ()))]
  if missing:
    raise ConfigError(f'utility scores requested with no data for {", ".join(missing)}: '
                      'transition.grow computes upcycle.args.scores')
  rule, seed = a['utility_allocation'], src.upcycle.seed
  return {layer: [int(c) for c in utility.allocate(scores[layer], multiplier, rule, seed)]
          for layer in moe_layers}


def _more_experts(dst, src, factor, args):
  utility.check_allocation(args['utility_allocation'])   # before any gradient is taken
  if args['utility_metric'] not in utility.METRICS:
    raise ConfigError(f"upcycle.utility_metric={args['utility_metric']!r} is not one of "
                      f'{utility.METRICS}')
  dst.moe.num_experts = src.moe.num_experts * factor


def _score_batches(args):
  """Gradient batches of utility allocation (weight_norm reads none)."""
  if args['allocation'] != 'utility' or args['utility_metric'] == 'weight_norm':
    return 0
  return args['utility_batches']


def _scores(inputs, args, seed):
  del seed   # sampled allocation draws in build
  """Seed 000's utility of every expert, from the source and its batches."""
  if args['allocation'] != 'utility':
    return args
  (source,) = inputs
  scores = utility.model_scores(source.config, source.params, source.batches,
                                args['utility_metric'])
  return dict(args, scores={layer: [float(x) for x in s] for layer, s in scores.items()})


@recipes.register('expand_experts', dict(
    allocation='uniform', scores=None, utility_allocation='dhondt', utility_metric='grad_norm',
    utility_batches=64, layout='append', expert_heuristic='copy', expert_args={},
    router_heuristic='copy', router_args={}, delta=1e-3, split_bias=False),
                  target=_more_experts, uses_factor=True, batches=_score_batches,
                  prepare=_scores)
def expand_experts(src, dst, args):
  a = recipes.resolve('expand_experts', args)
  m = recipes.expert_factor(src, dst)
  recipes.check_topk(dst, 'target')
  recipes.same(src, dst, 'model.num_layers', 'moe.top_k', 'moe.every', 'moe.first_dense')
  if a['delta'] and not dst.moe.use_bias:
    raise ConfigError(f"upcycle.args.delta={a['delta']} perturbs router biases (seed 000 "
                      'Definition 3.1), but moe.use_bias=False; set delta=0 or use_bias=True')
  counts = _counts(src, a, m)
  if a['split_bias'] and any(set(c) != {m} for c in counts.values()):
    raise ConfigError(f'upcycle.args.split_bias=True needs {m} copies of every expert '
                      f'(one score split {m} ways); the allocation gave {counts}')
  slots = {layer: layout.replica_slots(c, a['layout']) for layer, c in counts.items()}
  rules = (
      Rule(r'layers_\d+/moe/experts/(wi_0|wi_1|wo)', (r'\g<0>',),
           ops.replicate_experts(slots, a['expert_heuristic'], a['expert_args'])),
      Rule(r'layers_\d+/moe/router/(w|bias)', (r'\g<0>',),
           ops.extend_router(slots, a['router_heuristic'], a['router_args'], a['delta'],
                             1 / m if a['split_bias'] else 1.0)),
      recipes.copy_rest(),
  )
  resolved = {k: v for k, v in a.items() if k != 'scores'}
  records = {}
  if a['allocation'] == 'utility':
    records['upcycle_scores.json'] = utility.dump(
        a['scores'], counts, a['utility_metric'], _score_batches(a), a['utility_allocation'])
  return recipes.Recipe('expand_experts', rules, dict(resolved, counts=counts), a['opt_policy'],
                        records)
