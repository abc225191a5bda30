"""Router rows for the merge recipe, from the sources' own hidden states, and
the routing share that tells whether a merged router sends each source's
tokens to that source's experts.

  x = router_inputs(config, params, batches)        # {layer: [T, D]} per source
  rows = hidden_rows([x_0, x_1, ...], per_source)   # {layer: [D, n*g]}
  rows = domain_rows([x_0, x_1, ...], per_source, steps, lr, seed)
  share = own_share(config, params, batches, source, per_source)

The router input of layer l is what its MLP reads: the mlp_norm output
(pre-norm blocks) or the attention sublayer's normed sum (post-norm), taken
from the dense source on valid tokens only. Plain numpy and small jitted
functions: the rows are constants of the jitted map (ops.table).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from moe_jax.upcycle import forward


def router_inputs(config, params, batches):
  """{layer name: [T, D] float32}: each layer's MLP input on the valid
  tokens of `batches`, as the dense model computes it."""
  model = forward.model(config)
  norm = 'mlp_norm' if model.cfg.norm_position == 'pre' else 'attn_norm'

  @jax.jit
  def capture(p, batch):
    _, state = model.apply({'params': p}, batch['inputs'], segment_ids=batch['segment_ids'],
                           positions=batch['positions'], mutable=['intermediates'],
                           capture_intermediates=lambda m, _: m.name == norm)
    return {name: layer[norm]['__call__'][0] for name, layer in state['intermediates'].items()
            if name.startswith('layers_')}

  out = {}
  for batch in batches:
    valid = np.asarray(batch['segment_ids']) > 0
    for name, x_BLD in jax.device_get(capture(params, batch)).items():
      out.setdefault(name, []).append(np.asarray(x_BLD, np.float32)[valid])
  return {name: np.concatenate(xs) for name, xs in out.items()}


def _expand(w_Dn, per_source):
  """Source columns [D, n] -> expert columns [D, n*g], each source's repeated."""
  return np.repeat(w_Dn, per_source, axis=1)


def hidden_rows(inputs, per_source):
  """mergekit's hidden gates, negatives = the other sources: per layer, column
  i is the unit vector of mean_i - mean(mean_j, j != i)."""
  n = len(inputs)
  out = {}
  for layer in inputs[0]:
    mu_nD = np.stack([x[layer].mean(0) for x in inputs])
    others = (mu_nD.sum(0, keepdims=True) - mu_nD) / (n - 1)
    d_nD = mu_nD - others
    d_nD /= np.maximum(np.linalg.norm(d_nD, axis=1, keepdims=True), 1e-12)
    out[layer] = _expand(d_nD.T, per_source)
  return out


def domain_rows(inputs, per_source, steps, lr, seed=0):
  """Per layer, a linear router [D, n] trained by Adam for `steps` full-batch
  steps on softmax cross-entropy against the source label (each source's
  tokens weighted equally), then repeated to source i's g experts."""
  n = len(inputs)
  tx = optax.adam(lr)

  def loss_fn(w_Dn, x_TD, label_T, weight_T):
    logp_Tn = jax.nn.log_softmax(x_TD @ w_Dn, axis=-1)
    return -jnp.sum(weight_T * jnp.take_along_axis(logp_Tn, label_T[:, None], 1)[:, 0])

  @jax.jit
  def train(w_Dn, x_TD, label_T, weight_T):
    def step(carry, _):
      w, opt = carry
      g = jax.grad(loss_fn)(w, x_TD, label_T, weight_T)
      updates, opt = tx.update(g, opt, w)
      return (optax.apply_updates(w, updates), opt), None
    (w_Dn, _), _ = jax.lax.scan(step, (w_Dn, tx.init(w_Dn)), None, length=steps)
    return w_Dn

  out = {}
  for k, layer in enumerate(inputs[0]):
    xs = [x[layer] for x in inputs]
    x_TD = np.concatenate(xs)
    label_T = np.concatenate([np.full(len(x), i, np.int32) for i, x in enumerate(xs)])
    weight_T = np.concatenate([np.full(len(x), 1.0 / (n * len(x)), np.float32) for x in xs])
    d = x_TD.shape[1]
    w0 = 0.01 * jax.random.normal(jax.random.fold_in(jax.random.key(seed), k), (d, n))
    out[layer] = _expand(np.asarray(train(w0, x_TD, label_T, weight_T)), per_source)
  return out


def own_share(config, params, batches, source, per_source):
  """Share of the (valid token, top-k slot) pairs of `batches` that a merged
  MoE (config, params) sends to source `source`'s experts, over all MoE
  layers; 1.0 is perfect routing by domain."""
  model = forward.model(config)

  @jax.jit
  def idx(p, batch):
    _, state = model.apply({'params': p}, batch['inputs'], segment_ids=batch['segment_ids'],
                           positions=batch['positions'], mutable=['intermediates'])
    return [state['intermediates'][f'layers_{i}']['moe']['routing'][0].idx_BLk
            for i in model.cfg.moe_layers]

  own = total = 0
  for batch in batches:
    valid = np.asarray(batch['segment_ids']) > 0
    for idx_BLk in jax.device_get(idx(params, batch)):
      mine = (np.asarray(idx_BLk) // per_source == source)[valid]
      own, total = own + int(mine.sum()), total + mine.size
  return own / max(total, 1)
