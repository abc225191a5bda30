"""Growing live params: what both the CLI (checkpoints to a new workdir) and
the trainer (in-run, at step tau) run.

  dst_config = transition.target_config(config, num_sources)
  n = transition.batches_needed(config)          # training batches per source
  growth = transition.grow(config, dst_config, [recipes.Input(cfg, params, batches)],
                           report_batches=[val_batches])
  growth.params, growth.recipe, growth.reports    # one report per source

`config` is a full training config whose `upcycle` group names the recipe;
the recipe declares its sources, batches and `prepare` (recipes/__init__.py),
so nothing here names a recipe or an allocation. Nothing here imports the
trainer.
"""
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from moe_jax import schema
from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config, losses, transformer
from moe_jax.upcycle import forward, mapping, recipes
from moe_jax.workdir import lineage

# Group keys a recipe with an arg of that name takes unless its args set it:
# one config can hold two recipes' transitions (a sweep's points pick the
# recipe; args of one would be unknown to the other), and configs written
# before the utility keys became expand_experts' args still load.
_GROUP_ARGS = ('factor', 'split_bias', 'utility_metric', 'utility_batches')


def abstract_params(config):
  return transformer.abstract_params(forward.model(config), config.seq_len)


def _args(up, num_sources=1):
  """upcycle.args as a dict, with the group keys of _GROUP_ARGS (split_bias
  only when set) and, for a several-source recipe, `num_sources`."""
  args = up.args.to_dict() if hasattr(up.args, 'to_dict') else dict(up.args)
  spec = recipes.get(up.recipe)
  for key in _GROUP_ARGS:
    if key in spec.defaults and (key != 'split_bias' or up.split_bias):
      args.setdefault(key, up[key])
  if spec.sources == 'several':
    given = args.get('num_sources') or num_sources
    if given != num_sources:
      raise ConfigError(f'upcycle.args.num_sources={given} but the growth has {num_sources} '
                        'sources (--src)')
    args['num_sources'] = num_sources
  return args


class Growth(NamedTuple):
  params: Any
  recipe: recipes.Recipe
  reports: list     # per source: its function-preservation report (none without batches)


def target_config(config, num_sources=1):
  """The config of the model grown from `num_sources` sources of `config`'s
  architecture (see configs/common.py:upcycle). Runs the recipe's `target`,
  so its args are checked before any params are read."""
  up = config.upcycle
  spec = recipes.get(up.recipe)
  if (spec.sources == 'several') != (num_sources > 1):
    raise ConfigError(
        f'upcycle.recipe={up.recipe} grows several sources (python -m moe_jax.upcycle '
        '--src=A,B[,...])' if spec.sources == 'several' else
        f'upcycle.recipe={up.recipe} grows one source; got {num_sources}')
  schema.check(config, groups=('upcycle',))
  args = _args(up, num_sources)
  for key, value in args.items():
    if isinstance(value, float) and not math.isfinite(value):
      raise ConfigError(f'upcycle.args.{key}={value} must be a finite number')
  dst = config.copy_and_resolve_references()
  if spec.target:   # the recipe's own change of shape
    spec.target(dst, config, up.factor, {**spec.defaults, **args})
  for group, overrides in up.target.items():
    if group not in dst:
      raise ConfigError(f'upcycle.target.{group} is not a config group')
    for key, value in overrides.items():
      if key not in dst[group]:
        raise ConfigError(f'upcycle.target.{group}.{key} is not a config key')
      dst[group][key] = value
  dst.upcycle.step, dst.upcycle.recipe = 0, ''   # the grown model does not grow again
  model_config.from_config(dst, vocab_size=1)  # one-line errors for a bad target
  return dst


def config_at(config, step):
  """The model config in force at `step` of a run whose config is `config`:
  after an in-run transition (step >= upcycle.step) the grown one."""
  tau = config.upcycle.step
  return target_config(config) if tau and step >= tau else config


def batches_needed(config, num_sources=1):
  """Training batches per source the recipe reads before it builds."""
  spec = recipes.get(config.upcycle.recipe)
  return spec.batches({**spec.defaults, **_args(config.upcycle, num_sources)})


def grow(config, dst_config, inputs, report_batches=None, out_shardings=None,
         say=lambda message: None):
  """The growth of `inputs` (recipes.Input per source, each with the
  batches_needed training batches) into `dst_config`'s model, jitted:
  prepare -> build -> transform, then each source's preservation report on
  its `report_batches` (a list per source; None: no report). `say(message)`
  hears what starts before each phase that compiles, so a log attributes a
  silent minute."""
  up = config.upcycle
  spec = recipes.get(up.recipe)
  args = _args(up, len(inputs))
  want = batches_needed(config, len(inputs))
  for i, source in enumerate(inputs):
    if len(source.batches) != want:
      raise ValueError(f'source {i} brought {len(source.batches)} training batches; '
                       f'recipe {up.recipe} reads {want}')
  if spec.prepare:
    if want:
      say(f'preparing {up.recipe} on {want} training batches per source')
    args = spec.prepare(inputs, {**spec.defaults, **args}, up.seed)
  recipe = recipes.build(up.recipe, config, dst_config, args)
  tree = (inputs[0].params if spec.sources == 'one' else
          {recipes.source_prefix(i): s.params for i, s in enumerate(inputs)})
  say(f'growing the params by {up.recipe} (one program of its rules)')
  params = mapping.transform(recipe, tree, abstract_params(dst_config), up.seed, out_shardings)
  reports = []
  for i, (source, batches) in enumerate(zip(inputs, report_batches or ())):
    say(f'the function-preservation report on {len(batches)} batches (one program: the '
        'forward before and after)')
    report = preservation_report(source.config, dst_config, source.params, params, batches)
    if spec.source_report:
      report.update(spec.source_report(dst_config, params, batches, i, recipe.args))
    reports.append(report)
  return Growth(params, recipe, reports)


def summary(reports):
  """One report of several sources': losses weighted by tokens, the largest
  |delta logits|."""
  tokens = sum(r['tokens'] for r in reports)
  mean = lambda k: sum(r[k] * r['tokens'] for r in reports) / tokens
  return dict(loss_before=mean('loss_before'), loss_after=mean('loss_after'),
              max_abs_dlogits=max(r['max_abs_dlogits'] for r in reports), tokens=tokens)


def provenance(config, recipe):
  """What lineage records of a growth besides the seed: the recipe, its
  resolved args, the factor (None where the recipe has none) and the
  target's overrides."""
  up = config.upcycle
  target = up.target.to_dict() if hasattr(up.target, 'to_dict') else dict(up.target)
  factor = up.factor if recipes.get(recipe.name).uses_factor else None
  return dict(recipe=recipe.name, factor=factor, args=recipe.args, target=target)


def grow_lineage(record, step, config, recipe, report, *, workdir, start_step, how, parent,
                 tokens_per_step, model, **parents):
  """The lineage `record` grown at `step` by this upcycle: one more stage, in
  `workdir` from `start_step`, whose origin (`how`, `parent`) holds the seed,
  the recipe's provenance and the preservation `report` (and, for several
  sources, `parents` and `parent_lineages`). The upcycle CLI (how='upcycle')
  and the trainer's in-run transition (how='in_run') both record a growth
  through here."""
  origin = lineage.origin(how, parent, config.upcycle.seed, report=report, **parents,
                          **provenance(config, recipe))
  return lineage.grow(record, step, lineage.stage(workdir, start_step, tokens_per_step, model,
                                                  origin))


def preservation_report(config, dst_config, params, dst_params, batches):
  """Loss before and after, and max |delta logits|, on the same batches."""
  src_model, dst_model = forward.model(config), forward.model(dst_config)

  @jax.jit
  def compare(src_p, dst_p, batch):
    kw = dict(segment_ids=batch['segment_ids'], positions=batch['positions'])
    a, _ = src_model.apply({'params': src_p}, batch['inputs'], **kw)
    b, _ = dst_model.apply({'params': dst_p}, batch['inputs'], **kw)
    mask = batch['loss_mask']
    ce = lambda logits: losses.cross_entropy(logits, batch['targets'], mask)
    (la, n), (lb, _) = ce(a), ce(b)
    diff = jnp.max(jnp.where(batch['segment_ids'][..., None] > 0, jnp.abs(a - b), 0.0))
    return la * n, lb * n, n, diff

  before = after = count = 0.0
  max_diff = 0.0
  for batch in batches:
    la, lb, n, diff = (float(x) for x in jax.device_get(compare(params, dst_params, batch)))
    before, after, count = before + la, after + lb, count + n
    max_diff = max(max_diff, float(diff))
  if not count:
    raise ConfigError('the function-preservation report got no validation tokens')
  return dict(loss_before=before / count, loss_after=after / count,
              max_abs_dlogits=max_diff, tokens=int(count))
