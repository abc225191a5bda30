"""Utility scores per expert and replica allocation (seed 000 §4.2, App. B).

  acc = accumulate_sq_grads(loss_fn, params, batches)   # mean g and mean g^2
  scores = expert_scores(params, acc, 'grad_norm')      # {layer: [E]}
  scores = model_scores(config, params, batches, 'grad_norm')   # both, for a config's model
  counts = replica_counts(scores, m, 'proportional')    # {layer: [E]}, sum m*E
  json.dump(dump(scores, counts, 'grad_norm', len(batches), 'proportional'), f)

Metrics, per expert e of one MoE layer, over its wi_0, wi_1 and wo blocks,
with g the gradient averaged over the batches (seed 000 eqs. 19-20, Table 4):
  grad_norm    u_GN  = ||g_e||^2
  saliency     u_SAL = ||w_e|| * ||g_e||
  weight_norm  u_WN  = ||w_e||^2 (needs no gradients)
  curvature    u_CN  = g_e^T H_e^-1 g_e with H_e the diagonal Fisher estimated
               from the squared-gradient accumulator (seed 000 App. B "Why not
               second-order?", ref. [30]): sum_i gbar_i^2 / mean_b(g_{b,i}^2),
               0 where the Fisher is 0. Table 4 writes it ||g||^2 / H. Each term
               is <= 1 (Jensen), so it measures how consistently an expert's
               gradient points one way across batches; one batch gives the
               parameter count for every expert (the uniform allocation), and
               a noise-dominated term falls only as 1/batches, so it needs
               many: on a trained tiny model 8 batches still allocated
               uniformly and 64 did not (tests/upcycle/test_utility.py),
               hence the default upcycle.args.utility_batches=64.

Allocation (`upcycle.args.utility_allocation`) turns scores into replica
counts r_e >= 1 summing to m * E; dhondt and proportional give equal scores
r_e = m:
  dhondt        greedy with replacement (seed 000 §5.3.2): starting from one
                copy each, every further copy goes to the expert with the
                largest utility per copy u_e / r_e (ties: fewer copies, then
                lower index), the highest-averages (D'Hondt) rule. Seed 000
                says "greedy selection with replacement" without the per-copy
                split, and without it one expert would take every copy. Its
                price: at m = 2, scores within a factor of two of each other
                give every expert its second copy, i.e. uniform duplication
                (what ||w||^2 did in every Table 4 run, docs/experiments.md).
  proportional  the (m - 1) * E extra copies in proportion to u_e, by largest
                remainder (ties: lower index): r_e - 1 ~ (m - 1) u_e / mean(u)
                where D'Hondt gives r_e ~ m u_e / mean(u). Not less uniform:
                at m = 2 it stays uniform while max(u) - min(u) is below about
                mean(u) (D'Hondt: while max(u) / min(u) <= 2), so scores
                [1.45, 1.45, 0.55, 0.55] give D'Hondt 3, 3, 1, 1 and it 2, 2, 2, 2
                (tests/upcycle/test_utility.py). All-zero scores count as equal.
  sampled       the extra copies drawn with replacement with probability
                u_e / sum(u) from a generator seeded by `seed` (upcycle.seed):
                proportional in expectation, random in each draw.
  equal         the same draws with probability 1 / E whatever the scores:
                sampled's randomness without its utility, the control that
                says whether sampled's gain is the utility or the unequal
                counts (equal scores make sampled draw exactly these).
"""
import jax
import jax.numpy as jnp
import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.upcycle import forward, paths

METRICS = ('grad_norm', 'saliency', 'weight_norm', 'curvature')
_EXPERTS = ('wi_0', 'wi_1', 'wo')


def accumulate_sq_grads(loss_fn, params, batches):
  """{'grad': mean g, 'sq_grad': mean g^2, 'num_batches': n} over `batches`.

  `loss_fn(params, batch) -> scalar`; the gradient step is jitted once.
  """
  grad_fn = jax.jit(jax.grad(loss_fn))
  acc_g = acc_sq = None
  n = 0
  for batch in batches:
    g = grad_fn(params, batch)
    sq = jax.tree_util.tree_map(jnp.square, g)
    acc_g = g if acc_g is None else jax.tree_util.tree_map(jnp.add, acc_g, g)
    acc_sq = sq if acc_sq is None else jax.tree_util.tree_map(jnp.add, acc_sq, sq)
    n += 1
  if not n:
    raise ConfigError('utility scores requested with no data: 0 gradient batches')
  mean = lambda t: jax.tree_util.tree_map(lambda x: x / n, t)
  return {'grad': mean(acc_g), 'sq_grad': mean(acc_sq), 'num_batches': n}


def _per_expert(flat, layer, fn):
  """sum over the layer's expert blocks of fn(leaf...) summed per expert -> [E]."""
  total = 0.0
  for name in _EXPERTS:
    xs = [f[f'{layer}/moe/experts/{name}'] for f in flat]
    total = total + np.asarray(jnp.sum(fn(*xs).reshape(xs[0].shape[0], -1), axis=1),
                               np.float64)
  return total


def expert_scores(params, acc, metric):
  """{layer name: np.float64 [E]} utility of each expert of each MoE layer."""
  if metric not in METRICS:
    raise ConfigError(f'upcycle.args.metric={metric!r} is not one of {METRICS}')
  if metric != 'weight_norm' and not (acc and acc.get('num_batches')):
    raise ConfigError(f'utility scores {metric!r} requested with no data: no gradients '
                      'were accumulated')
  p = paths.flatten(params)
  layers = sorted({paths.layer(k) for k in p if k.endswith('/moe/experts/wi_0')},
                  key=lambda s: int(s.split('_')[1]))
  if not layers:
    raise ConfigError('utility scores need MoE layers; the params have none')
  g = paths.flatten(acc['grad']) if acc else {}
  sq = paths.flatten(acc['sq_grad']) if acc else {}
  out = {}
  for layer in layers:
    w2 = _per_expert([p], layer, jnp.square)
    if metric == 'weight_norm':
      out[layer] = w2
      continue
    g2 = _per_expert([g], layer, jnp.square)
    if metric == 'grad_norm':
      out[layer] = g2
    elif metric == 'saliency':
      out[layer] = np.sqrt(w2) * np.sqrt(g2)
    else:
      ratio = lambda gi, fi: jnp.where(fi > 0, gi * gi / jnp.where(fi > 0, fi, 1.0), 0.0)
      out[layer] = _per_expert([g, sq], layer, ratio)
  return out


def model_scores(config, params, batches, metric):
  """expert_scores of `params`, a model of `config`, from its LM loss's
  gradients over `batches` (weight_norm reads none)."""
  acc = None
  if metric != 'weight_norm':
    acc = accumulate_sq_grads(forward.lm_loss(config), params, list(batches or []))
  return expert_scores(params, acc, metric)


ALLOCATIONS = ('dhondt', 'proportional', 'sampled', 'equal')


def check_allocation(rule):
  if rule not in ALLOCATIONS:
    raise ConfigError(f'upcycle.args.utility_allocation={rule!r} is not one of {ALLOCATIONS}')


def allocate(scores_E, multiplier, rule='dhondt', seed=0):
  """Replica counts [E] (each >= 1, sum multiplier * E) by allocation `rule`."""
  check_allocation(rule)
  u = np.asarray(scores_E, np.float64)
  if u.ndim != 1 or not len(u) or not np.all(np.isfinite(u)) or np.any(u < 0):
    raise ConfigError(f'utility scores must be finite, non-negative and one per expert; got {u}')
  if int(multiplier) != multiplier or multiplier < 2:
    raise ConfigError(f'expansion factor {multiplier} must be an integer >= 2')
  extra = (int(multiplier) - 1) * len(u)
  share = u / u.sum() if u.sum() > 0 else np.full(len(u), 1.0 / len(u))
  r = np.ones(len(u), np.int64)
  if rule == 'proportional':
    quota = extra * share
    r += np.floor(quota).astype(np.int64)
    rest = extra - int(r.sum() - len(u))
    # Largest remainder first; a stable sort keeps the lower index first on ties.
    r[np.argsort(-(quota - np.floor(quota)), kind='stable')[:rest]] += 1
  elif rule in ('sampled', 'equal'):
    p = share if rule == 'sampled' else np.full(len(u), 1.0 / len(u))
    draws = np.random.default_rng(seed).choice(len(u), size=extra, replace=True, p=p)
    r += np.bincount(draws, minlength=len(u))
  else:
    for _ in range(extra):
      # lexsort: last key is primary. Largest u/r, then fewest copies, then lowest index.
      best = np.lexsort((np.arange(len(u)), r, -(u / r)))[0]
      r[best] += 1
  return r


def replica_counts(scores, multiplier, rule='dhondt', seed=0):
  return {layer: allocate(s, multiplier, rule, seed) for layer, s in scores.items()}


def dump(scores, counts, metric, num_batches=0, rule='dhondt'):
  """JSON-serialisable record of the scores, the gradient batches they came
  from and the allocation they gave."""
  return {
      'metric': metric,
      'allocation': rule,
      'num_batches': int(num_batches),
      'layers': {layer: {'scores': [float(x) for x in scores[layer]],
                         'counts': [int(c) for c in counts[layer]] if counts else None}
                 for layer in scores},
  }
