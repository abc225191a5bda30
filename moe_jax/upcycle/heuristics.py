"""How replicas differ from their source: seed 000 Appendix D, Tables 9 and 10.

Seed 000 (000_5c16e7e3adfcfff6.txt, §4.3, Appendix D) evaluated ten expert and
ten router heuristics for E -> mE upcycling and found none beats plain copying
by more than 1e-3 loss; they are here so that finding can be reproduced. Every
heuristic touches replicas only (the first copy of each source expert stays
exact, as Definition 3.1 keeps the source's parameters), except router
`copy_noise`, which perturbs all copies, as opposed to `perturb_new_only`.

The appendix gives one line per method; where it leaves a detail open we chose
the reading below and say so. `neighbour` means source expert (e + 1) mod E.

Expert heuristics (Table 9), on replica matrices w [R, A, B] (y = x @ w):
  copy             exact duplicate.
  copy_noise       w + lam * std(w) * N(0, 1), std over the matrix ("calibrated").
  drop_upcycle     re-initialise a `drop` share of intermediate neurons (Drop-
                   Upcycling, ref. [39]): one neuron set per replica shared by
                   wi_0, wi_1 and wo; init xavier N(0, 2/(A+B)), kaiming
                   N(0, 2/A) or normal N(mean(w), std(w)) (the source statistics).
  random           Table 4's Random baseline: every replica re-initialised whole
                   by `init` (default kaiming N(0, 2/fan_in), He et al., seed
                   000 ref. [20]); Table 4 names no router change, so the
                   router columns are copied as with `copy`.
  shuffle_columns  an independent random permutation of the intermediate
                   neurons of each matrix (a shared one would be the same
                   function; the table says connectivity changes).
  interpolate      alpha * w + (1 - alpha) * neighbour.
  orthogonal       Gram-Schmidt: a Gaussian draw minus its projection on w,
                   rescaled to ||w|| (orthogonal to the original in parameter
                   space; eps guards the divisions).
  scaled_copy      s * w.
  svd_perturb      w = U S V^T; S *= 1 + sigma_v N; U, V += sigma_u N / sqrt(rows)
                   (so a unit singular vector moves by ~sigma_u); the smallest
                   `drop` share of singular values set to 0.
  svd_mix          U' = (1 - ratio) U + ratio U_nb, V' likewise, S kept.
  sparse_code_mix  codes C of w and of the neighbour over a shared random unit-
                   norm dictionary (dict_size atoms) by ISTA with L1 weight
                   sparsity * max|D^T w| for n_iter steps; w + mix * D (C_nb - C),
                   i.e. the codes are mixed and the uncoded residual is kept.
Router heuristics (Table 10), on router columns w [D, E] (and the bias [E]):
  copy, copy_noise (all columns + lam * std(w) * N), interpolate (alpha, with
  the neighbour), bias_only (weights copied, replica bias += lam * N),
  scaled_copy (s), perturb_new_only (replica columns + lam * std(w) * N),
  orthogonal (Gram-Schmidt per column, norm kept), adversarial
  (r - gamma (r - mean column): gamma=1 removes the column's preference, 2
  mirrors it), temperature_scaled (replica column and bias / T), svd_perturb
  (S *= 1 + sigma N on the whole [D, E] matrix; replicas take its columns).
Defaults are Table 8's best variant where it names one; Table 10 only names
qualitative variants ('light', 'sharp'), so those defaults are ours.
"""
import jax
import jax.numpy as jnp
import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.schema import field

EXPERT = {
    'copy': {},
    'copy_noise': dict(lam=0.01),
    'drop_upcycle': dict(drop=0.3, init='xavier'),
    'random': dict(init='kaiming'),
    'shuffle_columns': {},
    'interpolate': dict(alpha=0.2),
    'orthogonal': dict(eps=1e-6),
    'scaled_copy': dict(s=0.9),
    'svd_perturb': dict(sigma_v=0.15, sigma_u=0.0, drop=0.0),
    'svd_mix': dict(ratio=0.3),
    'sparse_code_mix': dict(dict_size=1024, sparsity=0.1, mix=0.3, n_iter=100),
}
ROUTER = {
    'copy': {},
    'copy_noise': dict(lam=0.01),
    'interpolate': dict(alpha=0.5),
    'bias_only': dict(lam=0.01),
    'scaled_copy': dict(s=0.9),
    'perturb_new_only': dict(lam=0.01),
    'orthogonal': dict(eps=1e-6),
    'adversarial': dict(gamma=0.1),
    'temperature_scaled': dict(T=1.5),
    'svd_perturb': dict(sigma=0.1),
}
DROP_INITS = ('xavier', 'kaiming', 'normal')


def options(kind, name, overrides):
  """Validated keyword arguments (defaults + overrides) of heuristic `name` of
  `kind` 'expert' (EXPERT) or 'router' (ROUTER); errors name the config keys
  upcycle.args.{kind}_heuristic and upcycle.args.{kind}_args."""
  table = EXPERT if kind == 'expert' else ROUTER
  if name not in table:
    raise ConfigError(f'upcycle.args.{kind}_heuristic={name!r} is not one of {tuple(table)}')
  unknown = sorted(set(overrides or {}) - set(table[name]))
  if unknown:
    raise ConfigError(f'upcycle.args.{kind}_args {unknown} are not options of {name!r}: '
                      f'{sorted(table[name])}')
  for key, value in dict(overrides or {}).items():   # as its default: 'big' for lam is refused
    field.check_value(f'upcycle.args.{kind}_args.{key}', value, type(table[name][key]))
  kw = {**table[name], **dict(overrides or {})}
  if kw.get('init', 'xavier') not in DROP_INITS:
    raise ConfigError(f"upcycle.args.{kind}_args.init={kw['init']!r} is not one of "
                      f'{DROP_INITS}')
  return kw


def _std(w_RAB):
  return jnp.std(w_RAB, axis=(1, 2), keepdims=True)


def neuron_mask(layer_rng, num, width, ratio):
  """[num, width] bool, True on round(ratio * width) random neurons per row.

  Drawn from the layer rng, so wi_0, wi_1 and wo of one expert share the set.
  """
  u = jax.random.uniform(layer_rng, (num, width))
  rank = jnp.argsort(jnp.argsort(u, axis=1), axis=1)
  return rank < int(round(ratio * width))


def drop_neurons(w_RAB, mask_RF, axis, init, rng):
  """Re-initialises the masked neurons (`axis` 1 or 2 of w) by `init`."""
  a, b = w_RAB.shape[1:]
  if init == 'xavier':
    fresh = jax.random.normal(rng, w_RAB.shape) * np.sqrt(2.0 / (a + b))
  elif init == 'kaiming':
    fresh = jax.random.normal(rng, w_RAB.shape) * np.sqrt(2.0 / a)
  else:
    mean = jnp.mean(w_RAB, axis=(1, 2), keepdims=True)
    fresh = mean + _std(w_RAB) * jax.random.normal(rng, w_RAB.shape)
  mask = mask_RF[:, None, :] if axis == 2 else mask_RF[:, :, None]
  return jnp.where(mask, fresh.astype(w_RAB.dtype), w_RAB)


def shuffle_neurons(w_RAB, axis, rng):
  n = w_RAB.shape[axis]
  perms = jax.vmap(lambda k: jax.random.permutation(k, n))(
      jax.random.split(rng, w_RAB.shape[0]))
  return jax.vmap(lambda m, p: jnp.take(m, p, axis=axis - 1))(w_RAB, perms)


def _orthogonal(w_RN, rng, eps):
  g = jax.random.normal(rng, w_RN.shape, w_RN.dtype)
  proj = jnp.sum(g * w_RN, -1, keepdims=True) / (jnp.sum(w_RN * w_RN, -1, keepdims=True) + eps)
  u = g - proj * w_RN
  return u * jnp.linalg.norm(w_RN, axis=-1, keepdims=True) / (
      jnp.linalg.norm(u, axis=-1, keepdims=True) + eps)


def _svd_perturb(w_RAB, rng, sigma_v, sigma_u, drop):
  u, s, vt = jnp.linalg.svd(w_RAB, full_matrices=False)
  k1, k2, k3 = jax.random.split(rng, 3)
  s = s * (1 + sigma_v * jax.random.normal(k1, s.shape))
  u = u + sigma_u * jax.random.normal(k2, u.shape) / np.sqrt(u.shape[-2])
  vt = vt + sigma_u * jax.random.normal(k3, vt.shape) / np.sqrt(vt.shape[-1])
  r = s.shape[-1]
  s = jnp.where(jnp.arange(r) < r - int(np.floor(drop * r)), s, 0.0)  # s is sorted descending
  return jnp.einsum('rak,rk,rkb->rab', u, s, vt)


def _ista(dict_AN, w_RAB, sparsity, n_iter):
  lipschitz = jnp.linalg.norm(dict_AN, 2) ** 2
  dtw_RNB = jnp.einsum('an,rab->rnb', dict_AN, w_RAB)
  lam = sparsity * jnp.max(jnp.abs(dtw_RNB), axis=(1, 2), keepdims=True)

  def step(c_RNB, _):
    resid = w_RAB - jnp.einsum('an,rnb->rab', dict_AN, c_RNB)
    c = c_RNB + jnp.einsum('an,rab->rnb', dict_AN, resid) / lipschitz
    return jnp.sign(c) * jnp.maximum(jnp.abs(c) - lam / lipschitz, 0.0), None

  c, _ = jax.lax.scan(step, jnp.zeros_like(dtw_RNB), None, length=n_iter)
  return c


def expert(name, kw, w_RAB, nbr_RAB, axis, rng, layer_rng):
  """Replica matrices from their sources `w` and neighbours `nbr` (Table 9)."""
  if name == 'copy':
    return w_RAB
  if name == 'copy_noise':
    return w_RAB + kw['lam'] * _std(w_RAB) * jax.random.normal(rng, w_RAB.shape)
  if name == 'drop_upcycle':
    mask = neuron_mask(layer_rng, w_RAB.shape[0], w_RAB.shape[axis], kw['drop'])
    return drop_neurons(w_RAB, mask, axis, kw['init'], rng)
  if name == 'random':
    mask = jnp.ones((w_RAB.shape[0], w_RAB.shape[axis]), bool)
    return drop_neurons(w_RAB, mask, axis, kw['init'], rng)
  if name == 'shuffle_columns':
    return shuffle_neurons(w_RAB, axis, rng)
  if name == 'interpolate':
    return kw['alpha'] * w_RAB + (1 - kw['alpha']) * nbr_RAB
  if name == 'orthogonal':
    flat = w_RAB.reshape(w_RAB.shape[0], -1)
    return _orthogonal(flat, rng, kw['eps']).reshape(w_RAB.shape)
  if name == 'scaled_copy':
    return kw['s'] * w_RAB
  if name == 'svd_perturb':
    return _svd_perturb(w_RAB, rng, kw['sigma_v'], kw['sigma_u'], kw['drop'])
  if name == 'svd_mix':
    u, s, vt = jnp.linalg.svd(w_RAB, full_matrices=False)
    u_nb, _, vt_nb = jnp.linalg.svd(nbr_RAB, full_matrices=False)
    mix = lambda a, b: (1 - kw['ratio']) * a + kw['ratio'] * b
    return jnp.einsum('rak,rk,rkb->rab', mix(u, u_nb), s, mix(vt, vt_nb))
  # sparse_code_mix
  d = jax.random.normal(rng, (w_RAB.shape[1], kw['dict_size']))
  d = d / jnp.linalg.norm(d, axis=0, keepdims=True)
  c = _ista(d, w_RAB, kw['sparsity'], kw['n_iter'])
  c_nb = _ista(d, nbr_RAB, kw['sparsity'], kw['n_iter'])
  return w_RAB + kw['mix'] * jnp.einsum('an,rnb->rab', d, c_nb - c)


def router_weight(name, kw, w_DE, src_of, replica, rng):
  """Target router columns [D, len(src_of)] from source columns (Table 10)."""
  out = w_DE[:, src_of]
  rep = np.nonzero(replica)[0]
  if name in ('copy', 'bias_only') or not len(rep):
    return out
  cols = w_DE[:, src_of[rep]]
  noise = lambda shape: kw['lam'] * jnp.std(w_DE) * jax.random.normal(rng, shape)
  if name == 'copy_noise':
    return out + noise(out.shape)
  if name == 'perturb_new_only':
    new = cols + noise(cols.shape)
  elif name == 'interpolate':
    new = kw['alpha'] * cols + (1 - kw['alpha']) * w_DE[:, (src_of[rep] + 1) % w_DE.shape[1]]
  elif name == 'scaled_copy':
    new = kw['s'] * cols
  elif name == 'orthogonal':
    new = _orthogonal(cols.T, rng, kw['eps']).T
  elif name == 'adversarial':
    new = cols - kw['gamma'] * (cols - jnp.mean(w_DE, axis=1, keepdims=True))
  elif name == 'temperature_scaled':
    new = cols / kw['T']
  else:  # svd_perturb
    u, s, vt = jnp.linalg.svd(w_DE, full_matrices=False)
    s = s * (1 + kw['sigma'] * jax.random.normal(rng, s.shape))
    new = ((u * s) @ vt)[:, src_of[rep]]
  return out.at[:, rep].set(new.astype(out.dtype))


def router_bias(name, kw, b_E, src_of, replica, rng, delta, group=1):
  """Target selection biases: copies, the heuristic's bias change on replicas,
  then Definition 3.1's U(-delta, delta) noise on replicas only. With `group`
  G > 1 the replicas come in runs of G (copied virtual groups, layout.grouped)
  and each run draws one noise value, so a group's members still tie."""
  out = b_E[src_of]
  rep = np.nonzero(replica)[0]
  if not len(rep):
    return out
  k1, k2 = jax.random.split(rng)
  new = out[rep]
  draw = lambda fn, key: jnp.repeat(fn(key, (len(rep) // group,)), group)
  if name == 'bias_only':
    new = new + kw['lam'] * draw(jax.random.normal, k1)
  elif name == 'temperature_scaled':
    new = new / kw['T']
  new = new + draw(lambda key, shape: jax.random.uniform(key, shape, minval=-delta,
                                                          maxval=delta), k2)
  return out.at[rep].set(new.astype(out.dtype))
