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
biases change picks: tests/upcycle/test_preservation.py), granularity [1]:
G > 1 copies virtual groups of G contiguous experts whole (a fine-grained
MoE, recipes/finegrained.py): a group's utility is its members' summed
scores, its copies are G contiguous experts in member order under either
layout, and its members share one draw of the bias noise, so they keep
tying; the router heuristic's own weight noise is still drawn per expert.
The target has moe.num_experts x upcycle.factor. Not exact: copies tie, so a
top-k slot that went to one expert now goes to its copy and the token loses
its next-best expert. At step 0 of a finegrained upcycle every group is the
dense MLP, so a whole-group doubling is exact there
(tests/upcycle/test_finegrained.py); copying single shards
(granularity=1) under the in_place layout, or drawing their bias noise apart,
lets top-(k G) take part of a group and is not.
"""
import dataclasses
from typing import Any

import numpy as np

from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import heuristics, layout, ops, utility
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Rule


@dataclasses.dataclass(frozen=True)
class Options(recipes.Options):
  allocation: str = field('uniform', choices=('uniform', 'utility'))
  scores: Any = None   # {layer: [E]} of allocation=utility: set by `prepare`, never by a config
  utility_allocation: str = field('dhondt', choices=utility.ALLOCATIONS)
  utility_metric: str = field('grad_norm', choices=utility.METRICS)
  utility_batches: int = field(64, at_least=0)
  layout: str = field('append', choices=layout.LAYOUTS)
  expert_heuristic: str = field('copy', choices=tuple(heuristics.EXPERT))
  expert_args: dict = dataclasses.field(default_factory=dict)
  router_heuristic: str = field('copy', choices=tuple(heuristics.ROUTER))
  router_args: dict = dataclasses.field(default_factory=dict)
  delta: float = field(1e-3, at_least=0)
  split_bias: bool = False
  granularity: int = field(1, at_least=1)


def _groups(src, a):
  """Virtual groups per layer (E / G), or a ConfigError naming granularity."""
  if src.moe.num_experts % a.granularity:
    raise ConfigError(f'upcycle.args.granularity={a.granularity!r} must be a positive integer '
                      f'dividing moe.num_experts={src.moe.num_experts}')
  return src.moe.num_experts // a.granularity


def _counts(src, a, multiplier):
  """Copies per virtual group (per expert at granularity 1), per MoE layer."""
  moe_layers = [f'layers_{i}' for i, k in enumerate(layout.layer_kinds(src)) if k == 'moe']
  groups, g = _groups(src, a), a.granularity
  if a.allocation == 'uniform':
    return {layer: [multiplier] * groups for layer in moe_layers}
  scores = a.scores or {}
  missing = [layer for layer in moe_layers if not len(scores.get(layer, ()))]
  if missing:
    raise ConfigError(f'utility scores requested with no data for {", ".join(missing)}: '
                      'transition.grow computes upcycle.args.scores')
  rule, seed = a.utility_allocation, src.upcycle.seed
  summed = {layer: [float(x) for x in np.asarray(scores[layer]).reshape(groups, g).sum(-1)]
            for layer in moe_layers}
  return {layer: [int(c) for c in utility.allocate(summed[layer], multiplier, rule, seed)]
          for layer in moe_layers}


def _more_experts(dst, src, factor, a):
  _groups(src, a)   # before any gradient is taken
  dst.moe.num_experts = src.moe.num_experts * factor


def _check(dst, src, a):
  """The grown config against the options, at a run's start (Spec.check)."""
  recipes.expert_factor(src, dst)   # a dense source, or a factor below 2, named first
  for kind in ('expert', 'router'):
    heuristics.options(kind, getattr(a, f'{kind}_heuristic'), getattr(a, f'{kind}_args'))
  if a.delta and not dst.moe.use_bias:
    raise ConfigError(f'upcycle.args.delta={a.delta} perturbs router biases (seed 000 '
                      'Definition 3.1), but moe.use_bias=False; set delta=0 or use_bias=True')


def _score_batches(a):
  """Gradient batches of utility allocation (weight_norm reads none)."""
  if a.allocation != 'utility' or a.utility_metric == 'weight_norm':
    return 0
  return a.utility_batches


def _scores(inputs, a, seed):
  """Seed 000's utility of every expert, from the source and its batches."""
  del seed   # sampled allocation draws in build
  if a.allocation != 'utility':
    return a
  (source,) = inputs
  scores = utility.model_scores(source.config, source.params, source.batches, a.utility_metric)
  return dataclasses.replace(a, scores={layer: [float(x) for x in s]
                                        for layer, s in scores.items()})


@recipes.register('expand_experts', Options, target=_more_experts, uses_factor=True,
                  check=_check, batches=_score_batches, prepare=_scores)
def expand_experts(src, dst, a):
  m = recipes.expert_factor(src, dst)
  recipes.check_topk(dst, 'target')
  recipes.same(src, dst, 'model.num_layers', 'moe.top_k', 'moe.every', 'moe.first_dense')
  counts = _counts(src, a, m)
  if a.split_bias and any(set(c) != {m} for c in counts.values()):
    raise ConfigError(f'upcycle.args.split_bias=True needs {m} copies of every expert '
                      f'(one score split {m} ways); the allocation gave {counts}')
  g = a.granularity
  slots = {layer: layout.grouped(layout.replica_slots(c, a.layout), g)
           for layer, c in counts.items()}
  rules = (
      Rule(r'layers_\d+/moe/experts/(wi_0|wi_1|wo)', (r'\g<0>',),
           ops.replicate_experts(slots, a.expert_heuristic, a.expert_args)),
      Rule(r'layers_\d+/moe/router/(w|bias)', (r'\g<0>',),
           ops.extend_router(slots, a.router_heuristic, a.router_args, a.delta,
                             1 / m if a.split_bias else 1.0, g)),
      recipes.copy_rest(),
  )
  counts = {layer: [int(c) for c in s.counts] for layer, s in slots.items()}   # per expert
  records = {}
  if a.allocation == 'utility':
    records['upcycle_scores.json'] = utility.dump(
        a.scores, counts, a.utility_metric, _score_batches(a), a.utility_allocation)
  return recipes.Recipe('expand_experts', rules, dict(recipes.as_dict(a, 'scores'), counts=counts),
                        a.opt_policy, records)
