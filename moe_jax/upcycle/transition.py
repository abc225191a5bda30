"""Applying an upcycle to live params: what both the CLI (checkpoint to
checkpoint) and the trainer (in-run, at step tau) call.

  dst_config = transition.target_config(config)
  dst_params, recipe, scores = transition.apply(config, dst_config, params, batches)
  report = transition.preservation_report(config, dst_config, params, dst_params, batches)

`config` is a full training config whose `upcycle` group names the recipe.
Nothing here imports the trainer.
"""
import math

import jax
import jax.numpy as jnp

from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config, losses, transformer
from moe_jax.upcycle import mapping, recipes, utility
from moe_jax.workdir import lineage


def _model(config):
  return transformer.Transformer(model_config.ModelConfig.from_config(config))


def abstract_params(config):
  return transformer.abstract_params(_model(config), config.seq_len)


def _args(up):
  """upcycle.args as a dict; a recipe with a `factor` (`split_bias`) arg takes
  upcycle.factor (upcycle.split_bias when set) unless the args set it. The
  group's key lets one config hold two recipes' transitions (a sweep's points
  pick the recipe; args of one would be unknown to the other)."""
  args = up.args.to_dict() if hasattr(up.args, 'to_dict') else dict(up.args)
  defaults = recipes.get(up.recipe).defaults
  if 'factor' in defaults:
    args.setdefault('factor', up.factor)
  if 'split_bias' in defaults and up.get('split_bias'):
    args.setdefault('split_bias', True)
  return args


def target_config(config):
  """The config of the grown model (see configs/common.py:upcycle)."""
  up = config.upcycle
  spec = recipes.get(up.recipe)
  if int(up.factor) != up.factor or up.factor < 2:
    raise ConfigError(f'upcycle.factor={up.factor} must be an integer >= 2')
  for key in ('report_batches', 'utility_batches', 'seed'):
    if not isinstance(up[key], int) or up[key] < 0:
      raise ConfigError(f'upcycle.{key}={up[key]!r} must be a non-negative integer')
  if up.utility_metric not in utility.METRICS:   # checked here, not after the gradients
    raise ConfigError(f'upcycle.utility_metric={up.utility_metric!r} is not one of '
                      f'{utility.METRICS}')
  for key, value in _args(up).items():
    if isinstance(value, float) and not math.isfinite(value):
      raise ConfigError(f'upcycle.args.{key}={value} must be a finite number')
  dst = config.copy_and_resolve_references()
  if spec.target:   # the recipe's own change of shape
    spec.target(dst, config, up.factor, {**spec.defaults, **_args(up)})
  for group, overrides in up.target.items():
    if group not in dst:
      raise ConfigError(f'upcycle.target.{group} is not a config group')
    for key, value in overrides.items():
      if key not in dst[group]:
        raise ConfigError(f'upcycle.target.{group}.{key} is not a config key')
      dst[group][key] = value
  dst.upcycle.step, dst.upcycle.recipe = 0, ''   # the grown model does not grow again
  model_config.ModelConfig.from_config(dst, vocab_size=1)  # one-line errors for a bad target
  return dst


def config_at(config, step):
  """The model config in force at `step` of a run whose config is `config`:
  after an in-run transition (step >= upcycle.step) the grown one."""
  tau = config.get('upcycle', {}).get('step', 0)
  return target_config(config) if tau and step >= tau else config


def _lm_loss(config):
  model = _model(config)

  def loss_fn(params, batch):
    logits, _ = model.apply({'params': params}, batch['inputs'],
                            segment_ids=batch['segment_ids'], positions=batch['positions'])
    return losses.cross_entropy(logits, batch['targets'], batch['loss_mask'])[0]

  return loss_fn


def utility_scores(config, params, batches):
  """Seed 000 utility of every expert, from gradients over `batches`."""
  metric = config.upcycle.utility_metric
  acc = None
  if metric != 'weight_norm':
    acc = utility.accumulate_sq_grads(_lm_loss(config), params, list(batches or []))
  return utility.expert_scores(params, acc, metric), acc


def apply(config, dst_config, params, batches=None, out_shardings=None):
  """(dst params, recipe, scores record or None): the transform, jitted.

  `batches` feed the utility scores when `upcycle.args.allocation='utility'`.
  """
  up = config.upcycle
  args, record = _args(up), None
  if args.get('allocation') == 'utility':
    scores, acc = utility_scores(config, params, batches)
    args['scores'] = {layer: [float(x) for x in s] for layer, s in scores.items()}
  recipe = recipes.build(up.recipe, config, dst_config, args)
  if 'scores' in args:
    record = utility.dump(scores, recipe.args['counts'], up.utility_metric, acc,
                          recipe.args['utility_allocation'])
  dst = mapping.transform(recipe, params, abstract_params(dst_config),
                          jax.random.key(up.seed), out_shardings)
  return dst, recipe, record


def provenance(config, recipe):
  """What lineage records of a growth besides the seed: the recipe, its
  resolved args, the factor (None where the recipe has none) and the
  target's overrides."""
  up = config.upcycle
  target = up.target.to_dict() if hasattr(up.target, 'to_dict') else dict(up.target)
  factor = up.factor if recipes.get(recipe.name).uses_factor else None
  return dict(recipe=recipe.name, factor=factor, args=recipe.args, target=target)


def grow_lineage(record, step, config, recipe, report, *, workdir, start_step, how, parent,
                 tokens_per_step, model):
  """The lineage `record` grown at `step` by this upcycle: one more stage, in
  `workdir` from `start_step`, whose origin (`how`, `parent`) holds the seed,
  the recipe's provenance and the preservation `report`. The upcycle CLI
  (how='upcycle') and the trainer's in-run transition (how='in_run') both
  record a growth through here."""
  origin = lineage.origin(how, parent, config.upcycle.seed, report=report,
                          **provenance(config, recipe))
  return lineage.grow(record, step, lineage.stage(workdir, start_step, tokens_per_step, model,
                                                  origin))


def preservation_report(config, dst_config, params, dst_params, batches):
  """Loss before and after, and max |delta logits|, on the same batches."""
  src_model, dst_model = _model(config), _model(dst_config)

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
