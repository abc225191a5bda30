"""Training phases: per-phase multipliers of the LR and of the router losses.

Seed 001's continued pre-training after sparse upcycling has three phases,
each a share of the tokens with its own LR and balance / z-loss weights:

  warmup          5%   LR x 0.1   balance x 5     z-loss x 2     the router learns to spread tokens
  specialization  70%  LR x 1     balance x 1     z-loss x 1     the experts diverge
  refinement      25%  LR x 0.1   balance x 0.5   z-loss x 0.5

which is `phases.fractions=(0.05, 0.7, 0.25)`, `phases.lr=(0.1, 1.0, 0.1)`,
`phases.balance=(5.0, 1.0, 0.5)`, `phases.z_loss=(2.0, 1.0, 0.5)`
(configs/common.py: SEED001_PHASES).
The phases split the steps from `start` (the in-run upcycle step tau, 0 for a
run that starts grown) to total_steps; before `start` nothing is scaled. The LR
multiplier scales opt's schedule (seed 001's piecewise-constant LR is
`opt.schedule=constant` with no warmup); the loss multipliers scale
moe.balance_loss_weight and moe.z_loss_weight. Empty `fractions`: one phase,
nothing scaled. A multiplier tuple left empty is all ones.
"""
import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.models import router

MULTIPLIERS = ('lr', 'balance', 'z_loss')


@dataclasses.dataclass(frozen=True)
class Phases:
  edges: tuple          # the first step of each phase
  lr: tuple             # one multiplier per phase, each tuple
  balance: tuple
  z_loss: tuple
  balance_weight: float  # moe.balance_loss_weight, moe.z_loss_weight
  z_weight: float

  def _at(self, values, step):
    """values[phase of `step`], 1 before the first phase."""
    index = jnp.sum(jnp.asarray(step) >= jnp.asarray(self.edges))
    return jnp.asarray((1.0,) + values, jnp.float32)[index]

  def lr_scale(self, step):
    return self._at(self.lr, step)

  def loss_weights(self, step):
    """(balance-loss weight, z-loss weight) at `step`."""
    return (self.balance_weight * self._at(self.balance, step),
            self.z_weight * self._at(self.z_loss, step))

  def aux_loss(self, aux, step, reduction='sum'):
    """The router losses of the model's aux dict, weighted for `step`'s phase
    and summed or averaged over MoE layers (`reduction`, moe.router_loss_reduction;
    the model's own aux['aux_loss'] uses the unscaled weights)."""
    w_balance, w_z = self.loss_weights(step)
    return router.router_loss(aux.get('moe', {}), w_balance, w_z, reduction)


def build(config, start=0):
  """Phases of `config.phases` over steps [start, total_steps), or None when
  there is one phase. Bad values are a ConfigError naming the key."""
  p = config.phases
  fractions = _numbers(p.fractions, 'phases.fractions')
  if not fractions:
    for key in MULTIPLIERS:
      if p[key]:
        raise ConfigError(f'phases.{key}={tuple(p[key])} needs phases.fractions')
    return None
  if any(f <= 0 for f in fractions) or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
    raise ConfigError(f'phases.fractions={fractions} must be positive and sum to 1')
  values = {}
  for key in MULTIPLIERS:
    values[key] = _numbers(p[key], f'phases.{key}') or (1.0,) * len(fractions)
    if len(values[key]) != len(fractions):
      raise ConfigError(f'phases.{key}={values[key]} needs one value per phase '
                        f'({len(fractions)}, phases.fractions={fractions})')
    if any(v < 0 for v in values[key]):
      raise ConfigError(f'phases.{key}={values[key]} must be >= 0')
  steps = config.total_steps - start
  edges = tuple(start + int(round(c * steps)) for c in np.cumsum((0.0,) + fractions[:-1]))
  if len(set(edges + (config.total_steps,))) < len(fractions) + 1:
    raise ConfigError(f'phases.fractions={fractions} over the {steps} steps from {start} to '
                      f'total_steps={config.total_steps} leave a phase without steps')
  return Phases(edges, values['lr'], values['balance'], values['z_loss'],
                float(config.moe.balance_loss_weight), float(config.moe.z_loss_weight))


def _numbers(value, key):
  if not isinstance(value, (tuple, list)) or not all(
      isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
    raise ConfigError(f'{key}={value!r} must be a tuple of numbers')
  if not all(math.isfinite(v) for v in value):
    raise ConfigError(f'{key}={tuple(value)} must be finite')
  return tuple(float(v) for v in value)
