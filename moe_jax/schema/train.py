"""The trainer's config groups: `opt` (train/optimizer.py) and `phases`
(train/phases.py)."""
import dataclasses

from moe_jax.schema.field import field

SCHEDULES = ('wsd', 'cosine', 'constant')
DECAY_SHAPES = ('linear', 'cosine', 'sqrt')
MU_DTYPES = ('', 'float32', 'bfloat16')   # '': the params' dtype


@dataclasses.dataclass(frozen=True)
class OptConfig:
  """AdamW and its learning-rate schedule. These defaults are the config's
  (configs/common.py builds the group from them)."""
  name: str = field('adamw', choices=('adamw',))
  lr: float = field(3e-3, above=0.0)
  b1: float = field(0.9, at_least=0, below=1)
  b2: float = field(0.95, at_least=0, below=1)
  eps: float = field(1e-8, above=0.0)
  weight_decay: float = field(0.1, at_least=0.0)
  clip_norm: float = field(1.0, at_least=0.0)       # 0: no clipping
  schedule: str = field('wsd', choices=SCHEDULES)
  warmup_steps: int = field(50, at_least=0)
  # wsd: the share of steps in the final decay, and its shape.
  decay_fraction: float = field(0.2, at_least=0.0, at_most=1.0)
  decay_shape: str = field('linear', choices=DECAY_SHAPES)
  final_lr_fraction: float = field(0.0, at_least=0.0, at_most=1.0)
  rewarm_steps: int = field(0, at_least=0)   # a second warmup after an in-run upcycle transition
  # Adam's first moment: '' (as the params) | float32 | bfloat16 (edc4fca; before
  # it, as the params).
  mu_dtype: str = field('', choices=MU_DTYPES, added='')
  # The routers' weights learn at this x LR (890832d).
  router_lr_multiplier: float = field(1.0, above=0.0, added=1.0)


@dataclasses.dataclass(frozen=True)
class PhasesConfig:
  """Training phases (train/phases.py): the steps after upcycle.step split by
  `fractions`; in phase i opt's LR is scaled by lr[i] and the balance and
  z-loss weights by balance[i] and z_loss[i]. Seed 001's three-phase CPT is
  configs/common.py's SEED001_PHASES (`config.phases.update(SEED001_PHASES)`).
  Empty fractions: one phase, nothing scaled, as every run before the group
  had (d317086)."""
  fractions: tuple = field((), added=[])
  lr: tuple = field((), added=[])
  balance: tuple = field((), added=[])
  z_loss: tuple = field((), added=[])
