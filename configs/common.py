"""Shared config pieces: every config file starts from `base()`.

Each key has one home: a field of its group's dataclass in moe_jax/schema/
holds its default, what it means, its bounds, the value old runs had and
whether it fixes shapes or the data stream (schema/field.py); schema.GROUPS
is the table of groups.
  top level    schema/run.py      RunConfig: seed, steps, batch, cadence, init_from
  model, moe   schema/model.py    (presets: moe_jax/models/presets.py)
  opt, phases  schema/train.py    optimizer and schedule; seed 001's phases
  data         schema/data.py     corpus, tokenizer, packing
  ckpt, mesh   schema/run.py      Orbax checkpointing; device mesh and sharding
  upcycle      schema/upcycle.py  the in-run transition at upcycle.step (0: none)
"""
import ml_collections

from moe_jax import schema
from moe_jax.schema import field


def parse_arg(arg, **defaults):
  """Parses 'a=1,b=x,flag' (or '' / None) against typed defaults.

  A bare word is a boolean flag set to True, or, if `size` is a default and the
  word is not a known key, the value of `size` (so `:tiny` and `:10layer` work).
  """
  out = ml_collections.ConfigDict(defaults)
  for item in filter(None, (arg or '').split(',')):
    key, eq, value = item.partition('=')
    if not eq:
      if key in defaults and isinstance(defaults[key], bool):
        out[key] = True
        continue
      if 'size' in defaults:
        out.size = key
        continue
      raise ValueError(f'config argument {key!r} is not one of {sorted(defaults)}')
    if key not in defaults:
      raise ValueError(f'config argument {key!r} is not one of {sorted(defaults)}')
    kind = type(defaults[key])
    out[key] = (value.lower() in ('1', 'true', 'yes')) if kind is bool else kind(value)
  return out


def _group(name):
  return ml_collections.ConfigDict(field.defaults(schema.GROUPS[name]))


def model():
  """A CPU-sized Llama-style decoder (the `tiny` preset)."""
  return _group('model')


def moe():
  """MoE block settings; num_experts=0 makes every layer dense."""
  return _group('moe')


def opt():
  return _group('opt')


def data():
  return _group('data')


def ckpt():
  return _group('ckpt')


def mesh():
  return _group('mesh')


def upcycle():
  return _group('upcycle')


# Seed 001's three-phase continued pre-training: warmup, specialization, refinement.
SEED001_PHASES = dict(fractions=(0.05, 0.70, 0.25), lr=(0.1, 1.0, 0.1), balance=(5.0, 1.0, 0.5),
                      z_loss=(2.0, 1.0, 0.5))


def phases():
  return _group('phases')


def expand_args(allocation=None, delta=None, expert=None, router=None, layout=None,
                utility_allocation=None):
  """`upcycle.args` of recipe expand_experts (seed 000 Definition 3.1); None
  takes the recipe's default (moe_jax/upcycle/recipes/expand_experts.py).

  `delta` is the U(-delta, delta) noise on the replicas' router biases (the
  seed's default; needs moe.use_bias). `expert_args` and `router_args` hold
  every option of the chosen Table 9 / Table 10 heuristic (or `random`, Table
  4's Kaiming baseline) with its default, so each variant of Tables 11-12 is a
  command-line override: `expert=copy_noise` and then
  `--config.upcycle.args.expert_args.lam=0.05`.
  """
  from moe_jax.upcycle import heuristics, recipes  # pylint: disable=g-import-not-at-top
  d = recipes.defaults('expand_experts')
  pick = lambda value, key: d[key] if value is None else value
  expert, router = pick(expert, 'expert_heuristic'), pick(router, 'router_heuristic')
  return ml_collections.ConfigDict(dict(
      allocation=pick(allocation, 'allocation'), layout=pick(layout, 'layout'),
      utility_allocation=pick(utility_allocation, 'utility_allocation'),
      delta=pick(delta, 'delta'),
      expert_heuristic=expert,
      expert_args=heuristics.options('expert', expert, {}),
      router_heuristic=router,
      router_args=heuristics.options('router', router, {})))


def base():
  """Every group of the schema at its defaults, in config.json's order."""
  config = _group('')
  for name in schema.GROUPS:
    if name:
      config[name] = _group(name)
  return config


def apply_preset(config, name):
  """Sets `config.model` and `config.moe` to a named preset (moe_jax/models/presets.py)."""
  from moe_jax.models import presets  # pylint: disable=g-import-not-at-top
  presets.apply(config, name)
