"""Expert-upcycling cost model and upcycling efficiency (seed 000 sec. 3.1, 5.1).

Training an mE-expert MoE for T steps from scratch versus training the
E-expert model for tau steps and then the upcycled mE-expert model for the
remaining T - tau (seed 000 eq. 1), with s_E, s_mE the per-step times:
    C_fs = T s_mE,      C_up = tau s_E + (T - tau) s_mE,
    C_fs - C_up = tau (s_mE - s_E)                              (eq. 2).
When the E-expert checkpoint already exists its tau s_E is sunk and only
(T - tau) s_mE is spent ("expanding existing models"). Costs are in device-hours:
seconds per step times `devices`, over 3600.

Efficiency (eq. 4) normalises the upcycled loss between the two fixed-size runs:
    eta = (L(Fixed-E) - L(Upcycled)) / (L(Fixed-E) - L(Fixed-mE)),
1 meaning the upcycled run closed the whole gap.
"""
from moe_jax.errors import ConfigError


def upcycling_cost(s_e, s_me, total_steps, tau, devices=1):
  """Seed 000 eqs. 1-2 and the sunk-cost variant, in device-hours."""
  for name, value in (('s_E', s_e), ('s_mE', s_me), ('T', total_steps), ('devices', devices)):
    if not value > 0:
      raise ConfigError(f'{name} must be > 0, got {value}')
  if not 0 <= tau <= total_steps:
    raise ConfigError(f'tau must lie in [0, T={total_steps}], got {tau}')
  hours = devices / 3600.0
  c_fs = total_steps * s_me * hours
  c_up = (tau * s_e + (total_steps - tau) * s_me) * hours
  c_small = total_steps * s_e * hours
  c_sunk = (total_steps - tau) * s_me * hours
  saving = tau * (s_me - s_e) * hours
  return {
      'C_fs': c_fs,                       # Fixed-mE from scratch, eq. 1
      'C_up': c_up,                       # expert upcycling, eq. 1
      'C_fixed_E': c_small,               # Fixed-E for all T steps (the lower bound)
      'saving': saving,                   # eq. 2
      'saving_fraction': saving / c_fs,
      'C_up_sunk': c_sunk,                # the E-expert checkpoint already exists
      'sunk_saving_fraction': 1.0 - c_sunk / c_fs,
      'C_up_over_C_fixed_E': c_up / c_small,
  }


def efficiency(loss_fixed_e, loss_upcycled, loss_fixed_me):
  """Seed 000 eq. 4: the share of the Fixed-E to Fixed-mE loss gap closed."""
  gap = loss_fixed_e - loss_fixed_me
  if gap == 0:
    raise ConfigError('efficiency is undefined: L(Fixed-E) equals L(Fixed-mE)')
  return (loss_fixed_e - loss_upcycled) / gap
