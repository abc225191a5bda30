"""Rotary position embedding (Su et al.) and Llama 3's frequency rule.

`apply` rotates the halves [x1, x2] of each head (the transformers
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


def apply(x_BLHK, positions_BL, freq_K):
  """x rotated by angle position * freq, pairing dim i with dim i + K/2."""
  angle_BLK = positions_BL[..., None].astype(jnp.float32) * freq_K
  sin, cos = jnp.sin(angle_BLK)[:, :, None, :], jnp.cos(angle_BLK)[:, :, None, :]
  x1, x2 = jnp.split(x_BLHK.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BLHK.dtype)
