"""Upcycling recipes, a registry keyed by name: configs + args -> ordered rules.

  recipe = recipes.build(name, src_config, dst_config, args)
  dst = mapping.transform(recipe, src_params, abstract_dst, rng, out_shardings)

Each module of this package is one recipe (or a family: grow_depth.py also
registers `dus`) and owns everything about it: its options (a frozen
dataclass subclassing Options, one field per arg with its default and its
bounds or choices: schema/field.py), the target config it grows into
(`target`), whether `upcycle.factor` applies, and the rules. The module's
docstring is its description. A new recipe is one file here plus its config
in configs/upcycle/ and its test (docs/architecture.md).

`src_config` and `dst_config` are full training configs (ConfigDicts with the
`model` and `moe` groups of configs/common.py); `args` is `config.upcycle.args`
(a dict or ConfigDict), parsed once into the recipe's options (`parse`: an
unknown key, a value of another type or out of its bounds is a one-line
ConfigError naming upcycle.args.KEY); the recipe's functions get that frozen
instance. Everything per layer (replica counts from utility scores, layer
maps) is computed by the recipe, before the jitted map. Rules are matched
against target paths, first match wins; the last rule of every recipe copies
whatever else is unchanged (attention, norms, embeddings, lm_head, shared
experts). `recipe.fresh` lists the target patterns made from nothing. Every
recipe accepts `opt_policy` (reset | copy | scale, see mapping.map_opt_state;
a field of Options), kept in `recipe.opt_policy` for in-run transitions.

A recipe also declares its inputs (`register`'s keywords): how many sources
it grows (`sources='one'`, or `'several'`: the rules then read source i's
params under `source_prefix(i)`), how many training batches of each source
it reads before it builds (`batches(options)`), and `prepare(inputs,
options, seed)`, which turns those sources and batches into data-derived
options (utility scores, router rows). transition.grow runs them in that
order, for the upcycle command and the trainer's in-run transition alike.
"""
import dataclasses
import importlib
from typing import Any, Callable, Optional

from moe_jax import registry
from moe_jax.schema import field as schema_field
from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import mapping, ops
from moe_jax.upcycle.rules import Rule


@dataclasses.dataclass(frozen=True)
class Options:
  """The args every recipe takes; a recipe's own options subclass this, one
  field per arg (a new arg is one line in the recipe's file)."""
  opt_policy: str = field('copy', choices=mapping.POLICIES)


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
  params, the training batches its recipe asked for (`Spec.batches`), and
  where it came from for the growth's report: `source` (its checkpoint, or
  in-run the run's workdir) at `step`."""
  config: Any
  params: Any
  batches: tuple = ()
  source: str = ''
  step: int = 0


SOURCES = ('one', 'several')


@dataclasses.dataclass(frozen=True)
class Spec:
  """A registered recipe.

  build(src, dst, options) -> Recipe; options: its Options subclass;
  target(dst, src, factor, options) sets the grown shape on a copy of the
  source config (it runs before any params are read, so it is where the
  checks between options and configs go); check(dst, src, options) checks the
  options against the grown config once `upcycle.target` has overridden it
  (at a run's start too, not at its tau); uses_factor: `upcycle.factor`
  multiplies something (lineage prints it). sources: 'one' | 'several' (then
  `num_sources` is an option the command line sets); batches(options) ->
  training batches per source before `prepare`; prepare(inputs, options,
  seed) -> options with the data-derived ones set (`seed`: upcycle.seed);
  source_report(dst_config, dst_params, batches, i, options) -> extra fields
  of source i's function-preservation report.
  """
  name: str
  build: Callable
  options: type
  target: Optional[Callable] = None
  uses_factor: bool = False
  description: str = ''
  sources: str = 'one'
  batches: Callable = lambda args: 0
  prepare: Optional[Callable] = None
  source_report: Optional[Callable] = None
  check: Optional[Callable] = None


REGISTRY = registry.Registry('upcycle.recipe')


def register(name, options, target=None, uses_factor=False, description=None, check=None,
             **inputs):
  """Decorator on a recipe's build function: `upcycle.recipe=name` runs it
  with `options` (a frozen dataclass subclassing Options) parsed from
  upcycle.args. `inputs`: Spec's sources, batches, prepare, source_report."""
  if inputs.get('sources', 'one') not in SOURCES:
    raise ValueError(f"recipe {name!r}: sources={inputs['sources']!r} is not one of {SOURCES}")
  if not (dataclasses.is_dataclass(options) and issubclass(options, Options)):
    raise ValueError(f'recipe {name!r}: options must be a dataclass subclassing Options')
  def add(build):
    module = importlib.import_module(build.__module__)
    REGISTRY.register(name, Spec(name, build, options, target, uses_factor,
                                 (description or module.__doc__ or '').strip(), check=check,
                                 **inputs))
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
  """Recipe `name`'s args with their defaults, a dict (configs start from it)."""
  return schema_field.defaults(get(name).options)


def build(name, src_config, dst_config, args=None):
  """The Recipe of `name` from `args` (upcycle.args, or options already parsed)."""
  spec, options = get(name), parse(name, args)
  if spec.check:   # transition.target_config ran it at the start; a direct caller may not have
    spec.check(dst_config, src_config, options)
  return spec.build(src_config, dst_config, options)


def parse(name, args, factor=None):
  """Recipe `name`'s options from `args` (a dict or ConfigDict; an Options
  instance passes as it is). An option named `factor` (grow_depth's and
  widen_mlp's) takes `factor`, the upcycle group's shared expansion factor,
  where `args` leave it out. An unknown key, a value of another type than its
  field's, or one outside its bounds or choices is a one-line ConfigError
  naming upcycle.args.KEY."""
  cls = get(name).options
  if isinstance(args, cls):
    return args
  given = dict(args.to_dict() if hasattr(args, 'to_dict') else (args or {}))
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(given) - set(fields))
  if unknown:
    raise ConfigError(f'upcycle.args {unknown} are not options of recipe {name!r}: '
                      f'{sorted(fields)}')
  if factor is not None and 'factor' in fields:
    given.setdefault('factor', factor)
  options = cls(**given)
  schema_field.check('upcycle.args', dataclasses.asdict(options), cls)
  return options


def as_dict(options, *leave_out):
  """The options as a JSON-serialisable dict (a Recipe's provenance),
  without the keys `leave_out`."""
  return {k: v for k, v in dataclasses.asdict(options).items() if k not in leave_out}


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
