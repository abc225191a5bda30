"""Growing live params: what both the CLI (checkpoints to a new workdir) and
the trainer (in-run, at step tau) run.

  dst_config = transition.target_config(config, num_sources)
  n = transition.batches_needed(config)          # training batches per source
  growth = transition.grow(config, dst_config,
                           [recipes.Input(cfg, params, batches, source=ckpt, step=step)],
                           report_batches=[val_batches])
  growth.params, growth.recipe, growth.reports    # one report per source
  growth.record                                   # upcycle_report.json: report_record

`config` is a full training config whose `upcycle` group names the recipe;
the recipe declares its sources, batches and `prepare` (recipes/__init__.py),
so nothing here names a recipe, an allocation or a recipe's option. Nothing
here imports the trainer, which writes `growth.record` as the upcycle command
does.
"""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from moe_jax import schema
from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config, losses, transformer
from moe_jax.upcycle import forward, mapping, recipes
from moe_jax.workdir import lineage


def abstract_params(config):
  return transformer.abstract_params(forward.model(config), config.seq_len)


def options(up, num_sources=1):
  """The recipe's options parsed from upcycle.args (recipes.parse: an option
  named `factor` takes upcycle.factor where the args leave it out) and, for a
  several-source recipe, `num_sources`."""
  args = up.args.to_dict() if hasattr(up.args, 'to_dict') else dict(up.args)
  if recipes.get(up.recipe).sources == 'several':
    given = args.get('num_sources') or num_sources
    if given != num_sources:
      raise ConfigError(f'upcycle.args.num_sources={given} but the growth has {num_sources} '
                        'sources (--src)')
    args['num_sources'] = num_sources
  return recipes.parse(up.recipe, args, up.factor)


class Growth(NamedTuple):
  params: Any
  recipe: recipes.Recipe
  reports: list     # per source: its function-preservation report (none without batches)
  record: dict      # the growth's report, upcycle_report.json (report_record)


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
  opts = options(up, num_sources)
  dst = config.copy_and_resolve_references()
  if spec.target:   # the recipe's own change of shape
    spec.target(dst, config, up.factor, opts)
  for group, overrides in up.target.items():
    if group not in dst:
      raise ConfigError(f'upcycle.target.{group} is not a config group')
    for key, value in overrides.items():
      if key not in dst[group]:
        raise ConfigError(f'upcycle.target.{group}.{key} is not a config key')
      try:
        dst[group][key] = value
      except (TypeError, ValueError):   # ml_collections keeps each key's type
        raise ConfigError(f'upcycle.target.{group}.{key}={value!r} must be of the type of '
                          f'{group}.{key} ({type(dst[group][key]).__name__})') from None
  if spec.check:
    spec.check(dst, config, opts)
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
  return recipes.get(config.upcycle.recipe).batches(options(config.upcycle, num_sources))


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
  opts = options(up, len(inputs))
  want = spec.batches(opts)
  for i, source in enumerate(inputs):
    if len(source.batches) != want:
      raise ValueError(f'source {i} brought {len(source.batches)} training batches; '
                       f'recipe {up.recipe} reads {want}')
  if spec.prepare:
    if want:
      say(f'preparing {up.recipe} on {want} training batches per source')
    opts = spec.prepare(inputs, opts, up.seed)
  recipe = recipes.build(up.recipe, config, dst_config, opts)
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
      report.update(spec.source_report(dst_config, params, batches, i, opts))
    reports.append(report)
  return Growth(params, recipe, reports, report_record(inputs, reports, recipe, up.seed))


def summary(reports):
  """One report of several sources': losses weighted by tokens, the largest
  |delta logits|."""
  tokens = sum(r['tokens'] for r in reports)
  mean = lambda k: sum(r[k] * r['tokens'] for r in reports) / tokens
  return dict(loss_before=mean('loss_before'), loss_after=mean('loss_after'),
              max_abs_dlogits=max(r['max_abs_dlogits'] for r in reports), tokens=tokens)


def preserved(reports):
  """The growth's function-preservation numbers: source 0's report, several
  sources' summary, or {} without reports."""
  if len(reports) < 2:
    return dict(reports[0]) if reports else {}
  return summary(reports)


def report_record(inputs, reports, recipe, seed):
  """The growth's report (files.REPORT, upcycle_report.json), one schema for
  the upcycle command and the in-run transition:

    loss_before, loss_after, max_abs_dlogits, tokens   `preserved(reports)`
                 (absent without report batches)
    source, step   where source 0 grew from: its checkpoint, or in-run the
                 run's workdir, at that step
    recipe       recipe.describe(): its name, resolved args (with what it
                 chose per layer, e.g. replica counts) and rules
    seed         upcycle.seed
    sources      several sources only: each one's report with its source, step

  Reports of older runs read in this schema through files.read_report."""
  record = dict(preserved(reports), source=inputs[0].source, step=inputs[0].step,
                recipe=recipe.describe(), seed=seed)
  if len(inputs) > 1:
    record['sources'] = [dict(r, source=s.source, step=s.step) for s, r in zip(inputs, reports)]
  return record


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
