"""AdamW with global-norm clipping and warmup + WSD / cosine / constant schedules.

Weight decay skips norms, biases and the router's selection bias; the router
bias is frozen for the optimizer altogether (it moves by `update_biases` from
expert load, DeepSeek-V3 style, never by gradient). `opt.router_lr_multiplier`
scales the routers' weight updates: AdamW moves an entry by about the
learning rate per update, so a router initialised near zero over a few
copies of one expert (an upcycle) can need more than the shared rate to part
them (docs/moesturizer.md).
"""
import re

import jax
import jax.numpy as jnp
import optax

from moe_jax import sharding

_NO_DECAY = re.compile(r'(norm/scale|bias)$')
_FROZEN = re.compile(r'moe/router/bias$')
_ROUTER = re.compile(r'moe/router/w$')


def _labels(params, pattern):
  return jax.tree_util.tree_map_with_path(
      lambda kp, _: bool(pattern.search(sharding.path_str(kp))), params)


def schedule(opt_cfg, total_steps, start_step=0, scale=None):
  """Learning rate as a function of the global step.

  One schedule spans the whole run, also across an in-run upcycle at
  `start_step` (seed 000 compares runs on one schedule); `rewarm_steps` adds a
  second linear warmup from there. `scale(step)` multiplies it (training
  phases, moe_jax/train/phases.py). `opt_cfg` is within its fields' bounds
  (schema/train.py): the trainer checks every group before anything is built
  (workdir/config_check.py).
  """
  peak, final = opt_cfg.lr, opt_cfg.lr * opt_cfg.final_lr_fraction
  warmup = opt_cfg.warmup_steps
  decay_steps = max(int(round(opt_cfg.decay_fraction * total_steps)), 1)

  def decay(frac):  # frac runs 0 -> 1 over the decay phase
    frac = jnp.clip(frac, 0.0, 1.0)
    if opt_cfg.decay_shape == 'linear':
      down = frac
    elif opt_cfg.decay_shape == 'sqrt':
      down = jnp.sqrt(frac)
    else:
      down = 0.5 * (1 - jnp.cos(jnp.pi * frac))
    return peak + (final - peak) * down

  def ramp(step, begin, length):
    return jnp.clip((step - begin + 1) / length, 0.0, 1.0) if length else 1.0

  def lr(step):
    step = jnp.asarray(step, jnp.float32)
    if opt_cfg.schedule == 'constant':
      value = jnp.full_like(step, peak)
    elif opt_cfg.schedule == 'cosine':  # from the peak after warmup down to `final`
      frac = jnp.clip((step - warmup) / max(total_steps - warmup, 1), 0.0, 1.0)
      value = final + (peak - final) * 0.5 * (1 + jnp.cos(jnp.pi * frac))
    else:  # wsd: warmup, hold the peak, decay over the last decay_fraction of the run
      value = jnp.where(step < total_steps - decay_steps, peak,
                        decay((step - (total_steps - decay_steps)) / decay_steps))
    value = value * ramp(step, 0, warmup)
    if start_step:
      value = value * ramp(step, start_step, opt_cfg.rewarm_steps)
    if scale is not None:
      value = value * scale(step)
    return value

  return lr


def make(opt_cfg, total_steps, params, start_step=0, lr_scale=None):
  """Returns (tx, lr_fn) for a params tree; `lr_scale(step)` multiplies the schedule.

  `tx` gives the AdamW direction with unit learning rate; the train step scales
  it by `lr_fn(global step)`. Keeping the schedule out of optax's own step count
  means a reset optimizer state (after an upcycle transition) does not restart
  the schedule.
  """
  lr = schedule(opt_cfg, total_steps, start_step, lr_scale)
  router_lr = opt_cfg.router_lr_multiplier
  decay_mask = jax.tree_util.tree_map(lambda no: not no, _labels(params, _NO_DECAY))
  adamw = optax.chain(
      optax.clip_by_global_norm(opt_cfg.clip_norm) if opt_cfg.clip_norm else optax.identity(),
      optax.adamw(1.0, b1=opt_cfg.b1, b2=opt_cfg.b2, eps=opt_cfg.eps,
                  weight_decay=opt_cfg.weight_decay, mask=decay_mask,
                  # A bf16 first moment halves its memory (the second stays float32).
                  mu_dtype=opt_cfg.mu_dtype or None),
      optax.masked(optax.scale(router_lr), _labels(params, _ROUTER)) if router_lr != 1.0
      else optax.identity())
  labels = jax.tree_util.tree_map(lambda f: 'frozen' if f else 'adamw', _labels(params, _FROZEN))
  return optax.multi_transform({'adamw': adamw, 'frozen': optax.set_to_zero()}, labels), lr
