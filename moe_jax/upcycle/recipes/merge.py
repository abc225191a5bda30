"""Many dense models into one MoE (Branch-Train-MiX; mergekit-moe): n dense
sources of one architecture, each trained on its own data, become an MoE
whose experts i*g ... (i+1)*g - 1 are source i's MLP (g =
experts_per_source), while attention, norms, embeddings and the LM head are
averaged over the sources or taken from one of them.

Args (defaults in brackets): experts_per_source [1]; expert_init [copy] and
noise, drop_ratio, drop_init as dense_to_moe (each source's g experts made by
ops.tile_experts); shared [mean] | an integer i (the non-expert params of
source i; every other source's are read and dropped); router [random]:
  random  N(0, moe.router_init_std^2 or 2/(5 D)), as dense_to_moe;
  hidden  mergekit's `hidden` gate mode: row of source i's experts = the
          unit vector along (source i's mean router input on a few of its own
          training batches) minus (the mean of the other sources' means);
          mergekit subtracts negative prompts, here the other sources are them;
  domain  a linear router trained for `domain_steps` Adam steps to tell the
          sources apart from those same router inputs (softmax over sources,
          cross-entropy against the source label), its column i copied to
          source i's experts;
router_batches [4] training batches per source for hidden/domain,
domain_steps [200], domain_lr [0.01]. `num_sources` is set by the command
line from --src; `router_rows` ({layer: [D, E]}) by `prepare` for
hidden/domain (merge_router.py) from each source's first router_batches
training batches, never by a config. Each source's report adds `own_share`,
the share of its tokens routed to its experts.

Router inputs are each source's own (its layers before, on its own data), not
the merged model's: with averaged attention they differ, and the routing share
right after merging (the report) says by how much. Exact per source only
where the math allows: with identical non-MLP params (or shared=i for source
i), renormalised gates, top_k <= g and a router that sends source i's tokens
to its experts alone, the MoE computes source i on them.
"""
import dataclasses
import math
from typing import Any

from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import heuristics, merge_router, ops
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Rule

ROUTERS = ('random', 'hidden', 'domain')


@dataclasses.dataclass(frozen=True)
class Options(recipes.Options):
  num_sources: int = 0   # set from --src by the command line
  experts_per_source: int = field(1, at_least=1)
  expert_init: str = field('copy', choices=ops.TILE_INITS)
  noise: float = field(0.01, at_least=0)
  drop_ratio: float = 0.5   # in (0, 1) with expert_init=drop: ops.tile_experts
  drop_init: str = field('normal', choices=heuristics.DROP_INITS)
  shared: Any = 'mean'      # 'mean' or a source index: _shared
  router: str = field('random', choices=ROUTERS)
  router_batches: int = field(4, at_least=0)
  domain_steps: int = field(200, at_least=0)
  domain_lr: float = field(0.01, above=0)
  router_rows: Any = None   # {layer: [D, n g]} of router=hidden | domain: set by `prepare`


def _shared(src, a):
  """The source index whose non-expert params the merge keeps, or 'mean';
  the sources checked too, before any params are read."""
  n = a.num_sources
  if n < 2:
    raise ConfigError(f'merge needs at least 2 sources (--src=A,B[,...]); got {n}')
  if src.moe.num_experts:
    raise ConfigError(f'merge needs dense sources; they have moe.num_experts='
                      f'{src.moe.num_experts}')
  shared = a.shared
  if isinstance(shared, str) and shared.isdigit():   # from a command line: 'shared=1'
    shared = int(shared)
  if shared != 'mean' and not (isinstance(shared, int) and not isinstance(shared, bool)
                               and 0 <= shared < n):
    raise ConfigError(f"upcycle.args.shared={shared!r} is not 'mean' or a source index "
                      f'0..{n - 1}')
  return shared


def _experts(dst, src, factor, a):
  del factor
  _shared(src, a)
  dst.moe.num_experts = a.experts_per_source * a.num_sources


def _router_batches(a):
  return 0 if a.router == 'random' else a.router_batches


def _router_rows(inputs, a, seed):
  """router=hidden | domain: {layer: [D, n*g]} from each source's own router
  inputs on its batches (merge_router.py)."""
  if a.router == 'random':
    return a
  x = [merge_router.router_inputs(s.config, s.params, s.batches) for s in inputs]
  g = a.experts_per_source
  rows = (merge_router.hidden_rows(x, g) if a.router == 'hidden' else
          merge_router.domain_rows(x, g, a.domain_steps, a.domain_lr, seed))
  return dataclasses.replace(a, router_rows=rows)


def _own_share(dst_config, dst_params, batches, i, a):
  return dict(own_share=merge_router.own_share(dst_config, dst_params, batches, i,
                                               a.experts_per_source))


@recipes.register('merge', Options, target=_experts, sources='several',
                  batches=_router_batches, prepare=_router_rows, source_report=_own_share)
def merge(src, dst, a):
  shared = _shared(src, a)
  n, g = a.num_sources, a.experts_per_source
  if dst.moe.num_experts != n * g:
    raise ConfigError(f'moe.num_experts={dst.moe.num_experts} of the target is not '
                      f'{n} sources x {g} experts_per_source')
  recipes.check_topk(dst, 'target')
  recipes.same(src, dst, 'model.num_layers', 'model.d_model')
  if a.router == 'random':
    std = dst.moe.router_init_std or math.sqrt(2.0 / (5 * dst.model.d_model))
    router = Rule(r'layers_\d+/moe/router/w', (), ops.normal(std))
  elif a.router_rows is None:
    raise ConfigError(f'upcycle.args.router={a.router!r} needs router_rows from the '
                      'sources (python -m moe_jax.upcycle computes them)')
  else:
    router = Rule(r'layers_\d+/moe/router/w', (), ops.table(a.router_rows,
                                                             f'router_rows({a.router})'))
  every = lambda template: tuple(f'{recipes.source_prefix(i)}/{template}' for i in range(n))
  rules = (
      Rule(r'layers_(\d+)/moe/experts/(wi_0|wi_1|wo)', every(r'layers_\1/mlp/\2'),
           ops.merge_experts(n, g, init=a.expert_init, noise=a.noise, drop=a.drop_ratio,
                             drop_init=a.drop_init, top_k=dst.moe.top_k)),
      router,
      Rule(r'layers_\d+/moe/router/bias', (), ops.zeros()),
      Rule(r'(.*)', every(r'\1'), ops.mean() if shared == 'mean' else ops.pick(shared)),
  )
  return recipes.Recipe('merge', rules, dict(recipes.as_dict(a, 'router_rows'), shared=shared),
                        a.opt_policy)
