"""Named upcycling recipes: configs + args -> ordered rules.

  recipe = recipes.build(name, src_config, dst_config, args)
  dst = mapping.transform(recipe, src_params, abstract_dst, rng, out_shardings)

`src_config` and `dst_config` are full training configs (ConfigDicts with the
`model` and `moe` groups of configs/common.py); `args` is `config.upcycle.args`
(a dict or ConfigDict; unknown keys are an error). Everything per layer
(replica counts from utility scores, layer maps) is computed here, before the
jitted map. Rules are matched against target paths, first match wins; the
last rule of every recipe copies whatever else is unchanged (attention, norms,
embeddings, lm_head, shared experts). `recipe.fresh` lists the target
patterns made from nothing. Every recipe accepts `opt_policy` (reset | copy |
scale, see mapping.map_opt_state), kept in `recipe.opt_policy` for in-run
transitions.

Recipes and their args (defaults in brackets):
  dense_to_moe    sparse upcycling (seeds 001, 004). expert_init [copy] | noise
                  | subset | permute | drop (ops.tile_experts), noise [0.01],
                  drop_ratio [0.5], drop_init [normal] (source statistics),
                  router_init [normal]: N(0, moe.router_init_std^2 or 2/(5 D))
                  | zero. The target's layer pattern decides which layers
                  become MoE; the others keep their dense MLP.
                  Exact (function-preserving) with expert_init=copy when the
                  target's gates sum to 1: moe.renormalize=True or
                  order=topk_then_softmax, and no shared experts.
  expand_experts  E -> mE, top-k fixed (seed 000 Definition 3.1). allocation
                  [uniform] | utility (needs scores: {layer: [E]} from
                  utility.expert_scores), layout [append] | in_place,
                  expert_heuristic [copy] + expert_args, router_heuristic
                  [copy] + router_args (heuristics.py, Tables 9 and 10),
                  delta [0.001]: U(-delta, delta) on replicas' router biases
                  (needs moe.use_bias; set 0 without it). Not exact: copies
                  tie, so a top-k slot that went to one expert now goes to its
                  copy and the token loses its next-best expert.
  grow_width      E -> mE and k -> mk (seed 003 §3.2, m=2 there). alpha
                  [0.01]: N(0, (alpha sigma_orig)^2) on the new experts (sigma
                  of each source matrix) and their router columns (sigma of
                  the router), layout [append]. Selection biases (use_bias)
                  are copied, divided by m under softmax_then_topk with
                  softmax scores (each copy holds 1/m of the score). Exact at
                  alpha=0, biases included, with softmax scores (any order,
                  renormalised or not) and with sigmoid scores when
                  renormalize=True; not exact with sigmoid and
                  renormalize=False (each copy keeps the full gate, so the
                  layer output doubles).
  grow_depth      method [interpose] | stack | dus, factor [2], percent
                  (dus); layout.depth_map says which layers are copied and
                  how interleaved patterns are kept. `dus` is also its own
                  name (grow_depth with method=dus).
"""
import dataclasses
import math
from typing import Any

from moe_jax.errors import ConfigError
from moe_jax.upcycle import layout, mapping, ops, utility
from moe_jax.upcycle.rules import Rule

COMMON = dict(opt_policy='copy')


@dataclasses.dataclass(frozen=True)
class Recipe:
  name: str
  rules: tuple
  args: Any              # the resolved args (JSON-serialisable), for provenance
  opt_policy: str = 'copy'

  @property
  def fresh(self):
    """Target patterns initialised from scratch rather than from the source."""
    return tuple(r.target for r in self.rules if r.op.fresh)

  def describe(self):
    return {'recipe': self.name, 'args': self.args, 'rules': [
        [r.target, r.sources if isinstance(r.sources, tuple) else r.sources.__name__, r.op.name]
        for r in self.rules]}


def _args(name, args, defaults):
  given = dict(args.to_dict() if hasattr(args, 'to_dict') else (args or {}))
  unknown = sorted(set(given) - set(defaults))
  if unknown:
    raise ConfigError(f'upcycle.args {unknown} are not options of recipe {name!r}: '
                      f'{sorted(defaults)}')
  out = {**defaults, **given}
  if out['opt_policy'] not in mapping.POLICIES:
    raise ConfigError(f"upcycle.args.opt_policy={out['opt_policy']!r} is not one of "
                      f'{mapping.POLICIES}')
  return out


def _same(src, dst, *keys):
  for key in keys:
    group, field = key.split('.')
    a, b = src[group][field], dst[group][field]
    if a != b:
      raise ConfigError(f'{key} differs between source ({a}) and target ({b}); '
                        'this recipe keeps it')


def _check_topk(config, side):
  if config.moe.top_k > config.moe.num_experts:
    raise ConfigError(f'{side} moe.top_k={config.moe.top_k} exceeds moe.num_experts='
                      f'{config.moe.num_experts}')


def _factor(src, dst):
  e, e2 = src.moe.num_experts, dst.moe.num_experts
  if not e:
    raise ConfigError('the source is dense (moe.num_experts=0); use recipe dense_to_moe')
  if e2 % e or e2 // e < 2:
    raise ConfigError(f'expansion factor moe.num_experts {e} -> {e2} must be an integer >= 2')
  return e2 // e


def _copy_rest():
  return Rule(r'(.*)', (r'\1',), ops.copy())


def dense_to_moe(src, dst, args):
  a = _args('dense_to_moe', args, dict(COMMON, expert_init='copy', noise=0.01, drop_ratio=0.5,
                                       drop_init='normal', router_init='normal'))
  if src.moe.num_experts:
    raise ConfigError(f'dense_to_moe needs a dense source; it has moe.num_experts='
                      f'{src.moe.num_experts}')
  if not dst.moe.num_experts:
    raise ConfigError('dense_to_moe needs a target with moe.num_experts > 0')
  _check_topk(dst, 'target')
  _same(src, dst, 'model.num_layers', 'model.d_model')
  if a['router_init'] not in ('normal', 'zero'):
    raise ConfigError(f"upcycle.args.router_init={a['router_init']!r} is not one of "
                      "('normal', 'zero')")
  std = dst.moe.router_init_std or math.sqrt(2.0 / (5 * dst.model.d_model))
  num = dst.moe.num_experts
  tile = ops.tile_experts(num, a['expert_init'], a['noise'], a['drop_ratio'], a['drop_init'],
                          dst.moe.top_k)
  rules = (
      Rule(r'layers_(\d+)/moe/experts/(wi_0|wi_1|wo)', (r'layers_\1/mlp/\2',), tile),
      Rule(r'layers_\d+/moe/router/w', (),
                   ops.normal(std) if a['router_init'] == 'normal' else ops.zeros()),
      Rule(r'layers_\d+/moe/router/bias', (), ops.zeros()),
      _copy_rest(),
  )
  return Recipe('dense_to_moe', rules, a, a['opt_policy'])


def _counts(src, a, multiplier):
  moe_layers = [f'layers_{i}' for i, k in enumerate(layout.layer_kinds(src)) if k == 'moe']
  if a['allocation'] == 'uniform':
    return {layer: [multiplier] * src.moe.num_experts for layer in moe_layers}
  if a['allocation'] != 'utility':
    raise ConfigError(f"upcycle.args.allocation={a['allocation']!r} is not one of "
                      "('uniform', 'utility')")
  scores = a['scores'] or {}
  missing = [layer for layer in moe_layers if not len(scores.get(layer, ()))]
  if missing:
    raise ConfigError(f'utility scores requested with no data for {", ".join(missing)}: '
                      'set upcycle.args.scores from utility.expert_scores')
  return {layer: [int(c) for c in utility.allocate(scores[layer], multiplier)]
          for layer in moe_layers}


def expand_experts(src, dst, args):
  a = _args('expand_experts', args, dict(
      COMMON, allocation='uniform', scores=None, layout='append', expert_heuristic='copy',
      expert_args={}, router_heuristic='copy', router_args={}, delta=1e-3))
  m = _factor(src, dst)
  _check_topk(dst, 'target')
  _same(src, dst, 'model.num_layers', 'moe.top_k', 'moe.every', 'moe.first_dense')
  if a['delta'] and not dst.moe.use_bias:
    raise ConfigError(f"upcycle.args.delta={a['delta']} perturbs router biases (seed 000 "
                      'Definition 3.1), but moe.use_bias=False; set delta=0 or use_bias=True')
  counts = _counts(src, a, m)
  slots = {layer: layout.replica_slots(c, a['layout']) for layer, c in counts.items()}
  rules = (
      Rule(r'layers_\d+/moe/experts/(wi_0|wi_1|wo)', (r'\g<0>',),
                   ops.replicate_experts(slots, a['expert_heuristic'], a['expert_args'])),
      Rule(r'layers_\d+/moe/router/(w|bias)', (r'\g<0>',),
                   ops.extend_router(slots, a['router_heuristic'], a['router_args'], a['delta'])),
      _copy_rest(),
  )
  resolved = {k: v for k, v in a.items() if k != 'scores'}
  return Recipe('expand_experts', rules, dict(resolved, counts=counts), a['opt_policy'])


def grow_width(src, dst, args):
  a = _args('grow_width', args, dict(COMMON, alpha=0.01, layout='append'))
  m = _factor(src, dst)
  _same(src, dst, 'model.num_layers', 'moe.every', 'moe.first_dense')
  if dst.moe.top_k != m * src.moe.top_k:
    raise ConfigError(f'grow_width multiplies top_k with the experts: moe.top_k must be '
                      f'{m * src.moe.top_k}, not {dst.moe.top_k}')
  _check_topk(dst, 'target')
  counts = {f'layers_{i}': [m] * src.moe.num_experts
            for i, k in enumerate(layout.layer_kinds(src)) if k == 'moe'}
  slots = {layer: layout.replica_slots(c, a['layout']) for layer, c in counts.items()}
  lam = dict(lam=a['alpha'])
  # Softmax over mE copied logits gives each copy 1/m of its source's score;
  # selection by score + bias (router.select) keeps its order only if the bias
  # shrinks with it. Sigmoid scores and topk_then_softmax logits are not split.
  split = dst.moe.score == 'softmax' and dst.moe.order == 'softmax_then_topk'
  rules = (
      Rule(r'layers_\d+/moe/experts/(wi_0|wi_1|wo)', (r'\g<0>',),
                   ops.replicate_experts(slots, 'copy_noise', lam)),
      Rule(r'layers_\d+/moe/router/(w|bias)', (r'\g<0>',),
                   ops.extend_router(slots, 'perturb_new_only', lam,
                                     bias_scale=1 / m if split else 1.0)),
      _copy_rest(),
  )
  return Recipe('grow_width', rules, a, a['opt_policy'])


def grow_depth(src, dst, args, method=None):
  defaults = dict(COMMON, method='interpose', factor=2, percent=0.0)
  a = _args('grow_depth', args, defaults)
  if method:
    a['method'] = method
  _same(src, dst, 'moe.num_experts', 'moe.every', 'moe.first_dense', 'moe.top_k')
  lmap = layout.depth_map(src, a['method'], a['factor'], a['percent'])
  if dst.model.num_layers != len(lmap):
    raise ConfigError(f"grow_depth {a['method']} of {src.model.num_layers} layers gives "
                      f'{len(lmap)}; the target has model.num_layers={dst.model.num_layers}')
  src_kinds, dst_kinds = layout.layer_kinds(src), layout.layer_kinds(dst)
  for j, i in enumerate(lmap):
    if src_kinds[i] != dst_kinds[j]:
      raise ConfigError(f'grow_depth: target layers_{j} is {dst_kinds[j]} but its source '
                        f'layers_{i} is {src_kinds[i]}')

  def layer_source(match):
    return (f'layers_{lmap[int(match.group(1))]}/{match.group(2)}',)

  rules = (Rule(r'layers_(\d+)/(.*)', layer_source, ops.copy()), _copy_rest())
  return Recipe('grow_depth', rules, dict(a, layer_map=lmap), a['opt_policy'])


RECIPES = {
    'dense_to_moe': dense_to_moe,
    'expand_experts': expand_experts,
    'grow_width': grow_width,
    'grow_depth': grow_depth,
    'dus': lambda s, d, a: grow_depth(s, d, a, method='dus'),
}


def build(name, src_config, dst_config, args=None):
  if name not in RECIPES:
    raise ConfigError(f'upcycle recipe {name!r} is not one of {tuple(RECIPES)}')
  return RECIPES[name](src_config, dst_config, args)
