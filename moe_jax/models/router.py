"""Routers: scores, top-k selection, balance losses and the bias update.

A learned router is one matrix `router/w` [D, E] (init N(0, 2/(5 d_model)),
seed 002 appendix A.6) and, with `moe.use_bias`, a float32 `router/bias` [E]
that shifts *selection only* (DeepSeek-V3 aux-loss-free balancing, used by
seed 000): it never enters the gate values and gets no gradient; `update_biases`
moves it toward balance from the expert counts in `aux`.
A hash router (seed 001) has no parameters: a fixed token-id -> experts table.
Each router's entry point is in moe_jax/models/routers/.

Every statistic takes `valid` (False on padding, segment id 0), so padding
never counts as load, probability mass, entropy or z-loss.
"""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from moe_jax.models import layers


class Router(nn.Module):
  """Logits [.., E] in float32, and the selection bias (zeros without use_bias)."""
  num_experts: int
  init_std: float
  use_bias: bool

  @nn.compact
  def __call__(self, x_BLD):
    w_DE = self.param('w', nn.initializers.normal(self.init_std),
                      (x_BLD.shape[-1], self.num_experts), jnp.float32)
    logits_BLE = layers.dense(x_BLD.astype(jnp.float32), w_DE)
    if self.use_bias:
      bias_E = self.param('bias', nn.initializers.zeros, (self.num_experts,), jnp.float32)
    else:
      bias_E = jnp.zeros((self.num_experts,), jnp.float32)
    return logits_BLE, jax.lax.stop_gradient(bias_E)


def jitter(x_BLD, eps, rng):
  """Multiplicative input noise U(1 - eps, 1 + eps) on the router input (Switch)."""
  noise = jax.random.uniform(rng, x_BLD.shape, jnp.float32, 1.0 - eps, 1.0 + eps)
  return x_BLD * noise.astype(x_BLD.dtype)


def select(logits_BLE, bias_E, top_k, score='softmax', order='softmax_then_topk',
           renormalize=True):
  """Top-k experts, their gates, and the routing distribution `probs` [.., E].

  softmax_then_topk: scores = softmax or sigmoid(logits); pick top-k of
    scores + bias; gates = the picked scores, renormalised to sum to 1 if asked
    (Switch / Qwen; with sigmoid, DeepSeek-V3).
  topk_then_softmax: pick top-k of logits + bias; gates = softmax over the
    picked logits (Mixtral; seed 002 eq. 15).
  `probs` is what the balance loss and the entropy see: the softmax, or the
  sigmoid scores normalised over experts.
  """
  if order == 'topk_then_softmax':
    _, idx_BLk = jax.lax.top_k(logits_BLE + bias_E, top_k)
    gates_BLk = jax.nn.softmax(jnp.take_along_axis(logits_BLE, idx_BLk, axis=-1), axis=-1)
    return idx_BLk, gates_BLk, jax.nn.softmax(logits_BLE, axis=-1)
  if score == 'softmax':
    scores_BLE = jax.nn.softmax(logits_BLE, axis=-1)
    probs_BLE = scores_BLE
  else:
    scores_BLE = jax.nn.sigmoid(logits_BLE)
    probs_BLE = scores_BLE / jnp.sum(scores_BLE, axis=-1, keepdims=True)
  _, idx_BLk = jax.lax.top_k(scores_BLE + bias_E, top_k)
  gates_BLk = jnp.take_along_axis(scores_BLE, idx_BLk, axis=-1)
  if renormalize:
    total = jnp.sum(gates_BLk, axis=-1, keepdims=True)
    gates_BLk = gates_BLk / jnp.maximum(total, jnp.finfo(jnp.float32).tiny)
  return idx_BLk, gates_BLk, probs_BLE


@functools.lru_cache(maxsize=8)
def hash_table(vocab_size, num_experts, top_k, seed):
  """[V, k] int32: k distinct experts per token id, fixed by (V, E, k, seed).

  Sampling without replacement in O(V k^2): draw r in [0, E - j) and step over
  the experts already taken, in increasing order.
  """
  rng = np.random.default_rng(seed)
  table = np.zeros((vocab_size, 0), np.int64)
  for j in range(top_k):
    r = rng.integers(0, num_experts - j, size=vocab_size)
    for taken in np.sort(table, axis=1).T:
      r = r + (r >= taken)
    table = np.concatenate([table, r[:, None]], axis=1)
  return table.astype(np.int32)


def expert_counts(idx_BLk, valid_BL, num_experts):
  """[E] float32: routed assignments per expert over valid tokens."""
  onehot = jax.nn.one_hot(idx_BLk, num_experts, dtype=jnp.float32)
  return jnp.einsum('blke,bl->e', onehot, valid_BL.astype(jnp.float32))


def balance_loss(probs_BLE, idx_BLk, valid_BL, scope='global', load_E=None):
  """Switch balance loss E * sum_e f_e * P_e (seed 001; Fedus et al.).

  f_e: fraction of the k-per-token assignments that went to e (no gradient);
  P_e: mean routing probability of e. `global` takes both over every valid
  token of the batch; `sequence` takes them per row and averages over rows
  with any valid token (seed 003 appendix D.1: sequence-level for the 3B
  model, global-batch for the 17B). 1 at perfect balance. `load_E` (global
  scope) is f_e taken over a larger batch than this one.
  """
  num_experts, top_k = probs_BLE.shape[-1], idx_BLk.shape[-1]
  if scope == 'global':
    probs_BLE = probs_BLE.reshape(1, -1, num_experts)
    idx_BLk = idx_BLk.reshape(1, -1, top_k)
    valid_BL = valid_BL.reshape(1, -1)
  w_BL = valid_BL.astype(jnp.float32)
  n_B = jnp.sum(w_BL, axis=-1)
  onehot = jax.nn.one_hot(idx_BLk, num_experts, dtype=jnp.float32)
  f_BE = jnp.einsum('blke,bl->be', onehot, w_BL) / jnp.maximum(n_B * top_k, 1.0)[:, None]
  if load_E is not None and scope == 'global':
    f_BE = load_E[None, :]
  p_BE = jnp.einsum('ble,bl->be', probs_BLE, w_BL) / jnp.maximum(n_B, 1.0)[:, None]
  loss_B = num_experts * jnp.sum(jax.lax.stop_gradient(f_BE) * p_BE, axis=-1)
  has_B = (n_B > 0).astype(jnp.float32)
  return jnp.sum(loss_B * has_B) / jnp.maximum(jnp.sum(has_B), 1.0)


def _valid_mean(v_BL, valid_BL):
  w_BL = valid_BL.astype(jnp.float32)
  return jnp.sum(v_BL * w_BL) / jnp.maximum(jnp.sum(w_BL), 1.0)


def z_loss(logits_BLE, valid_BL):
  """Router z-loss (ST-MoE, seed 001): mean over tokens of logsumexp(logits)^2."""
  return _valid_mean(jax.nn.logsumexp(logits_BLE, axis=-1) ** 2, valid_BL)


def entropy(probs_BLE, valid_BL):
  """Mean per-token entropy of the routing distribution, in nats."""
  ent_BL = -jnp.sum(probs_BLE * jnp.log(jnp.maximum(probs_BLE, 1e-30)), axis=-1)
  return _valid_mean(ent_BL, valid_BL)


def router_loss(stats, w_balance, w_z, reduction='sum'):
  """w_balance * balance_loss + w_z * z_loss of every MoE layer in `stats`
  ({layer: stats}), summed over layers or averaged (seed 001's
  `compute_total_loss` divides each sum by the number of MoE layers, so a
  weight means the same whatever the depth)."""
  total = sum((w_balance * s['balance_loss'] + w_z * s['z_loss'] for s in stats.values()),
              jnp.float32(0.0))
  return total / max(len(stats), 1) if reduction == 'mean' else total


DEAD_LOAD = 0.01          # seed 001's monitor: an expert under 1% of the load is dead
HEALTHY_CV, HEALTHY_MIN_LOAD = 0.3, 0.02


def health(load_E):
  """Expert health as seed 001's `monitor_expert_utilization` defines it, from
  one layer's load fractions [E] (summing to 1): dict(cv, min_load, max_load,
  dead_1pct: experts under DEAD_LOAD, healthy: cv < 0.3 and every expert
  above 2%). Works on numpy and traced arrays alike."""
  load_E = jnp.asarray(load_E, jnp.float32)
  cv = jnp.std(load_E) / (jnp.mean(load_E) + 1e-10)
  low = jnp.min(load_E)
  return dict(cv=cv, min_load=low, max_load=jnp.max(load_E),
              dead_1pct=jnp.sum(load_E < DEAD_LOAD),
              healthy=(cv < HEALTHY_CV) & (low > HEALTHY_MIN_LOAD))


def update_biases(params, aux, rate):
  """DeepSeek-V3 sign rule: bias_e += rate * sign(mean load - load_e), per layer.

  Returns new params; every `layers_i/moe/router/bias` moves, using
  `aux['moe']['layers_i']['counts']` (global over the batch, padding excluded).
  A stacked train state (models/stacking.py) passes its `stack_*` columns
  with counts [R, E] stacked alike: each row is its own layer's.
  """
  out = dict(params)
  for name, stats in aux['moe'].items():
    router = params[name]['moe'].get('router', {})
    if 'bias' not in router:
      continue
    counts = stats['counts']   # [E], or [R, E] for a stacked column
    step = rate * jnp.sign(jnp.mean(counts, axis=-1, keepdims=True) - counts)
    moe = dict(params[name]['moe'], router=dict(router, bias=router['bias'] + step))
    out[name] = dict(params[name], moe=moe)
  return out
