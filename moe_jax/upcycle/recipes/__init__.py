"""Upcycling recipes, a registry keyed by name: configs + args -> ordered rules.

  recipe = recipes.build(name, src_config, dst_config, args)
  dst = mapping.transform(recipe, src_params, abstract_dst, rng, out_shardings)

Each module of this package is one recipe (or a family: grow_depth.py also
registers `dus`) and owns everything about it: its args and their defaults,
the target config it grows into (`target`), whether `upcycle.factor` applies,
and the rules. The module's docstring is its description. A new recipe is one
file here plus its config in configs/upcycle/ and its test (docs/architecture.md).

`src_config` and `dst_config` are full training configs (ConfigDicts with the
`model` and `moe` groups of configs/common.py); `args` is `config.upcycle.args`
(a dict or ConfigDict; unknown keys are an error). Everything per layer
(replica counts from utility scores, layer maps) is computed by the recipe,
before the jitted map. Rules are matched against target paths, first match
wins; the last rule of every recipe copies whatever else is unchanged
(attention, norms, embeddings, lm_head, shared experts). `recipe.fresh` lists
the target patterns made from nothing. Every recipe accepts `opt_policy`
(reset | copy | scale, see mapping.map_opt_state), kept in `recipe.opt_policy`
for in-run transitions.

A recipe also declares its inputs (`register`'s keywords): how many sources
it grows (`sources='one'`, or `'several'`: the rules then read source i's
params under `source_prefix(i)`), how many training batches of each source
it reads before it builds (`batches(args)`), and `prepare(inputs, args, seed)`,
which turns those sources and batches into data-derived args (utility
scores, router rows). transition.grow runs them in that order, for the
upcycle command and the trainer's in-run transition alike.
"""
import dataclasses
import importlib
from typing import Any, Callable, Optional

from moe_jax import registry
from moe_jax.errors import ConfigError
from moe_jax.upcycle import mapping, ops
from moe_jax.upcycle.rules import Rule

COMMON = dict(opt_policy='copy')


@dataclasses.dataclass(frozen=True)
class Recipe:
  name: str
  rules: tuple
  args: Any              # the resolved args (JSON-serialisable), for provenance
  opt_policy: str = 'copy'
  records: Any = None    # {file name: JSON record} written beside the growth's report

  @property
  def fresh(self):
    """Target patterns initialised from scratch rather than from the source."""
    return tuple(r.target for r in self.rules if r.op.fresh)

  def describe(self):
    return {'recipe': self.name, 'args': self.args, 'rules': [
        [r.target, r.sources if isinstance(r.sources, tuple) else r.sources.__name__, r.op.name]
        for r in self.rules]}


@dataclasses.dataclass(frozen=True)
class Input:
  """One source of a growth: its config (at the step it grows from), its
  params and the training batches its recipe asked for (`Spec.batches`)."""
  config: Any
  params: Any
  batches: tuple = ()


SOURCES = ('one', 'several')


@dataclasses.dataclass(frozen=True)
class Spec:
  """A registered recipe.

  build(src, dst, args) -> Recipe; defaults: every arg with its default
  (COMMON included); target(dst, src, factor, args) sets the grown shape on a
  copy of the source config (`args` resolved against `defaults`, unchecked;
  it runs before any params are read, so it is where args are checked);
  uses_factor: `upcycle.factor` multiplies something (lineage prints it).
  sources: 'one' | 'several' (then `num_sources` is an arg the command line
  sets); batches(args) -> training batches per source before `prepare`;
  prepare(inputs, args, seed) -> args with the data-derived ones added
  (`seed`: upcycle.seed);
  source_report(dst_config, dst_params, batches, i, args) -> extra fields of
  source i's function-preservation report.
  """
  name: str
  build: Callable
  defaults: dict
  target: Optional[Callable] = None
  uses_factor: bool = False
  description: str = ''
  sources: str = 'one'
  batches: Callable = lambda args: 0
  prepare: Optional[Callable] = None
  source_report: Optional[Callable] = None


REGISTRY = registry.Registry('upcycle.recipe')


def register(name, defaults, target=None, uses_factor=False, description=None, **inputs):
  """Decorator on a recipe's build function: `upcycle.recipe=name` runs it.
  `inputs`: Spec's sources, batches, prepare, source_report."""
  if inputs.get('sources', 'one') not in SOURCES:
    raise ValueError(f"recipe {name!r}: sources={inputs['sources']!r} is not one of {SOURCES}")
  def add(build):
    module = importlib.import_module(build.__module__)
    REGISTRY.register(name, Spec(name, build, dict(COMMON, **defaults), target, uses_factor,
                                 (description or module.__doc__ or '').strip(), **inputs))
    return build
  return add


def source_prefix(i):
  """Where source i's params sit in the tree a several-source recipe's rules
  read: src_i/..."""
  return f'src_{i}'


def names():
  return REGISTRY.names()


def get(name):
  return REGISTRY.get(name)


def defaults(name):
  """A copy of recipe `name`'s args with their defaults (configs start from it)."""
  return {k: v for k, v in get(name).defaults.items()}


def build(name, src_config, dst_config, args=None):
  return get(name).build(src_config, dst_config, args)


def resolve(name, args):
  """`args` (dict or ConfigDict) over the recipe's defaults; an unknown key or
  opt_policy is a one-line ConfigError."""
  spec = get(name)
  given = dict(args.to_dict() if hasattr(args, 'to_dict') else (args or {}))
  unknown = sorted(set(given) - set(spec.defaults))
  if unknown:
    raise ConfigError(f'upcycle.args {unknown} are not options of recipe {name!r}: '
                      f'{sorted(spec.defaults)}')
  out = {**spec.defaults, **given}
  if out['opt_policy'] not in mapping.POLICIES:
    raise ConfigError(f"upcycle.args.opt_policy={out['opt_policy']!r} is not one of "
                      f'{mapping.POLICIES}')
  return out


def same(src, dst, *keys):
  """Raises unless every 'group.key' is equal in source and target."""
  for key in keys:
    group, field = key.split('.')
    a, b = src[group][field], dst[group][field]
    if a != b:
      raise ConfigError(f'{key} differs between source ({a}) and target ({b}); '
                        'this recipe keeps it')


def check_topk(config, side):
  if config.moe.top_k > config.moe.num_experts:
    raise ConfigError(f'{side} moe.top_k={config.moe.top_k} exceeds moe.num_experts='
                      f'{config.moe.num_experts}')


def expert_factor(src, dst):
  """m of an E -> mE growth (an integer >= 2), or a ConfigError."""
  e, e2 = src.moe.num_experts, dst.moe.num_experts
  if not e:
    raise ConfigError('the source is dense (moe.num_experts=0); use recipe dense_to_moe')
  if e2 % e or e2 // e < 2:
    raise ConfigError(f'expansion factor moe.num_experts {e} -> {e2} must be an integer >= 2')
  return e2 // e


def copy_rest():
  """The last rule of every recipe: whatever else is unchanged, copied."""
  return Rule(r'(.*)', (r'\1',), ops.copy())


registry.import_all(__path__, __name__)
