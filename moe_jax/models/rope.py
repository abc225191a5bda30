"""Rotary position embedding (Su et al.) and Llama 3's frequency rule.

`rotate` turns the halves [x1, x2] of each head (the transformers
convention, so q and k import from a transformers checkpoint as plain
reshapes); `frequencies` gives the K/2 rotation speeds theta^(-2i/K), and with
`model.rope_scaling='llama3'` Llama 3.1's long-context rule: wavelengths
longer than original_max_len / low_freq_factor turn `factor` times slower,
those shorter than original_max_len / high_freq_factor stay, and the band
between blends the two linearly in original_max_len / wavelength.
"""
import math

import jax.numpy as jnp
import numpy as np


def frequencies(cfg):
  """[K/2] float32 rotation speeds (radians per position) for `cfg`'s heads.

  Computed in float64 on the host at trace time, so they are a constant of
  the compiled model.
  """
  freq = cfg.rope_theta ** (-np.arange(0, cfg.head_dim, 2, dtype=np.float64) / cfg.head_dim)
  if cfg.rope_scaling == 'llama3':
    old, low, high = cfg.rope_original_max_len, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
    wavelength = 2 * math.pi / freq
    smooth = (old / wavelength - low) / (high - low)
    blended = (1 - smooth) * freq / cfg.rope_factor + smooth * freq
    freq = np.where(wavelength > old / low, freq / cfg.rope_factor,
                    np.where(wavelength < old / high, freq, blended))
  return freq.astype(np.float32)


def _table(freq_K, n):
  """(sin, cos) [n, K/2] float32 of the float32 angles p * freq for p < n,
  rounded from float64 on the host: a constant of the compiled model."""
  angle_NK = np.arange(n, dtype=np.float32)[:, None] * np.asarray(freq_K, np.float32)
  angle_NK = angle_NK.astype(np.float64)
  return np.sin(angle_NK).astype(np.float32), np.cos(angle_NK).astype(np.float32)


def sin_cos(positions_BL, freq_K, max_position=None):
  """(sin, cos) [B, L, K/2] float32 of the angles position * freq.

  With `max_position` (positions known to lie below it: a full pass, where
  they restart at 0 in each packed document of an L-slot row) they are read
  from a host-built table, the correctly rounded values of the same float32
  angles; a position at or past the bound reads NaN, never a wrong angle.
  XLA:CPU fuses sin and cos computed on the device into the rotation and
  evaluates them again for every head (docs/benchmarks.md, "CPU step,
  round 2").
  """
  if max_position is None:
    angle_BLK = positions_BL[..., None].astype(jnp.float32) * freq_K
    return jnp.sin(angle_BLK), jnp.cos(angle_BLK)
  read = lambda t_NK: jnp.take(t_NK, positions_BL, axis=0, mode='fill', fill_value=jnp.nan)
  return tuple(read(t) for t in _table(freq_K, max_position))


def rotate(x_BLHK, sin_BLK, cos_BLK):
  """x rotated by the angles of `sin_cos`, pairing dim i with dim i + K/2."""
  sin, cos = sin_BLK[:, :, None, :], cos_BLK[:, :, None, :]
  x1, x2 = jnp.split(x_BLHK.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BLHK.dtype)
