"""Gradient accumulation: one step's loss, gradient and MoE statistics from n
microbatches run by a `lax.scan` inside the jitted step.

Equal (float32 round-off) to the same step on the whole batch, because every
term is rebuilt with the whole batch's normalisers:
  - cross-entropy: each microbatch's token sum over the batch's target count;
  - z-loss, entropy: token means weighted by the microbatch's share of the
    batch's valid tokens;
  - the global balance loss E * sum_e f_e * P_e: f_e (no gradient) must be the
    whole batch's expert load, known only after every microbatch is routed, so
    a forward-only scan first collects each layer's expert counts (one extra
    forward pass), then each microbatch's loss uses that f_e and its own P_e
    weighted by its share of tokens; the sequence-level balance loss is a
    mean over rows, weighted by the microbatch's share of rows;
  - expert counts (the selection-bias update, load, cv, dead) are summed.
Two things are per microbatch by nature: router jitter draws its noise per
microbatch, and capacity-factor dispatch (einsum) gives each microbatch its
own capacity (dropped_frac is then a token-weighted mean).

`grad_accum_steps=0` ('auto', the default) picks the count per platform
(`steps`): microbatches also make the CPU step faster, not only smaller.
"""
import jax
import jax.numpy as jnp

from moe_jax.models import layers, losses, router, stacking, transformer

# Tokens per device of one microbatch under grad_accum_steps=0 on CPU. XLA:CPU
# runs the step as whole-array passes whose speed is set by memory traffic,
# and a microbatch's activations stay in cache: the quickstart's dense step
# ran 1.41x as many tokens per CPU second in microbatches of 1024 tokens as
# in one batch of 2048 (512 and 256 tokens: 1.42x, 1.43x), the d_model 256 /
# seq_len 512 one 1.07x (512 tokens: 1.04x). 1024 was chosen from these runs
# (docs/benchmarks.md, "Microbatches on CPU").
CPU_MICROBATCH_TOKENS = 1024


def needs_count_pass(cfg):
  """Whether accumulation must first route every microbatch to learn the
  batch's expert load: the global balance loss weighs each microbatch's P_e
  by it (module docstring)."""
  return bool(cfg.moe_layers) and cfg.moe.balance_scope == 'global'


def _same_step_without_extra_pass(cfg):
  """Whether microbatches give the one-batch step with no extra pass: no MoE
  layer, or one with the sequence-level balance loss, a dropless dispatch
  (einsum gives each microbatch its own capacity) and no router jitter (drawn
  per microbatch)."""
  m = cfg.moe
  return not cfg.moe_layers or (not needs_count_pass(cfg) and m.dispatch != 'einsum'
                                and not m.jitter)


def steps(config, cfg, rows_per_device, platform):
  """The microbatch count a step runs: `config.grad_accum_steps`, or for 0
  ('auto') on CPU the fewest that bring a device's microbatch to at most
  CPU_MICROBATCH_TOKENS tokens (a divisor of its rows that keeps
  `model.loss_chunk` dividing a microbatch), elsewhere 1.

  Auto stays at 1 where microbatches would not give the same step without
  an extra pass: with the count pass the MoE steps measured ran 0.79-1.10x
  as fast in microbatches (the same section).
  """
  n = config.grad_accum_steps
  if n or platform != 'cpu' or not _same_step_without_extra_pass(cfg):
    return max(n, 1)
  fits = [d for d in range(1, rows_per_device + 1) if rows_per_device % d == 0 and (
      not cfg.loss_chunk or config.batch_size // d * config.seq_len % cfg.loss_chunk == 0)]
  return next((d for d in fits if rows_per_device // d * config.seq_len <= CPU_MICROBATCH_TOKENS),
              fits[-1])


def steps_for(config, cfg, batch_sharding):
  """`steps` for a batch laid out by `batch_sharding` (a NamedSharding)."""
  rows = batch_sharding.shard_shape((config.batch_size, config.seq_len))[0]
  return steps(config, cfg, rows, batch_sharding.mesh.devices.flat[0].platform)


def split(batch, n):
  """[B, ...] leaves -> [n, B/n, ...]. Microbatch m holds rows m, m + n, ...:
  strided, so each one stays spread over the devices the batch is split on."""
  return jax.tree.map(lambda x: x.reshape(x.shape[0] // n, n, *x.shape[1:]).swapaxes(0, 1),
                      batch)


def forward(model, params, batch, rng, hidden=False, expert_load=None):
  """The model on a batch; `params` in either layout (models/stacking.py)."""
  rngs = {'jitter': rng}
  return model.apply({'params': stacking.unstack(params, model.cfg)}, batch['inputs'],
                     segment_ids=batch['segment_ids'], positions=batch['positions'],
                     train=True, rngs=rngs, hidden=hidden, expert_load=expert_load)


def loss_terms(model, params, batch, rng, expert_load=None):
  """(mean cross-entropy, target count, aux) of one batch. With
  `model.loss_chunk` the LM head and the loss run chunk by chunk; with
  `model.cross_entropy='fused'` the logits stay in the compute dtype
  (models/losses.py), so the head is applied here rather than by the model,
  which returns float32 logits."""
  cfg = model.cfg
  if not cfg.loss_chunk and cfg.cross_entropy == 'reference':
    logits_BLV, aux = forward(model, params, batch, rng, expert_load=expert_load)
    ce, count = losses.cross_entropy(logits_BLV, batch['targets'], batch['loss_mask'])
    return ce, count, aux
  x_BLD, aux = forward(model, params, batch, rng, hidden=True, expert_load=expert_load)
  w_DV = transformer.head_weight(params, cfg)
  if cfg.loss_chunk:
    ce, count = losses.chunked_cross_entropy(x_BLD, w_DV, batch['targets'], batch['loss_mask'],
                                             cfg.loss_chunk, cfg.cross_entropy)
  else:
    ce, count = losses.cross_entropy(layers.dense(x_BLD, w_DV), batch['targets'],
                                     batch['loss_mask'], cfg.cross_entropy)
  return ce, count, aux


def _sizes(batch):
  """(targets, valid tokens, rows with a valid token) of a batch, float32."""
  valid_BL = batch['segment_ids'] != 0
  return (jnp.sum(batch['loss_mask'].astype(jnp.float32)),
          jnp.sum(valid_BL.astype(jnp.float32)),
          jnp.sum(jnp.any(valid_BL, axis=1).astype(jnp.float32)))


def value_and_grad(model, params, batch, rng, n, loss_weights):
  """(ce, target count, aux loss, aux, grads) of `batch` in `n` microbatches.

  `loss_weights` = (balance weight, z-loss weight) of this step. aux has the
  model's per-layer statistics (summed counts, whole-batch losses), ready for
  `step.moe_metrics` and `router.update_biases`.
  """
  cfg = model.cfg
  micro, keys = split(batch, n), jax.random.split(rng, n)
  total_targets, total_valid, total_rows = _sizes(batch)
  w_balance, w_z = loss_weights

  def zero_stats(keys_):
    return {f'layers_{i}': {k: jnp.zeros((cfg.moe.num_experts,) if k == 'counts' else (),
                                         jnp.float32) for k in keys_} for i in cfg.moe_layers}

  expert_load = None
  if needs_count_pass(cfg):
    def count_body(acc, xs):
      _, aux = forward(model, params, *xs, hidden=True)
      return jax.tree.map(jnp.add, acc, {k: dict(counts=s['counts'])
                                         for k, s in aux['moe'].items()}), None

    counts, _ = jax.lax.scan(count_body, zero_stats(('counts',)), (micro, keys))
    norm = jnp.maximum(total_valid * cfg.moe.top_k, 1.0)
    expert_load = {k: c['counts'] / norm for k, c in counts.items()}

  def micro_loss(params, mb, key):
    ce, count, aux = loss_terms(model, params, mb, key, expert_load)
    _, valid, rows = _sizes(mb)
    w_tok = valid / jnp.maximum(total_valid, 1.0)
    w_bal = w_tok if cfg.moe.balance_scope == 'global' else rows / jnp.maximum(total_rows, 1.0)
    stats = {name: dict(counts=s['counts'], balance_loss=s['balance_loss'] * w_bal,
                        z_loss=s['z_loss'] * w_tok, entropy=s['entropy'] * w_tok,
                        dropped_frac=s['dropped_frac'] * w_tok)
             for name, s in aux['moe'].items()}
    aux_loss = router.router_loss(stats, w_balance, w_z, cfg.moe.router_loss_reduction)
    ce_part = ce * count / jnp.maximum(total_targets, 1.0)
    return ce_part + aux_loss, (ce_part, aux_loss, stats)

  grad_fn = jax.value_and_grad(micro_loss, has_aux=True)

  def body(acc, xs):
    (_, parts), grads = grad_fn(params, *xs)
    return jax.tree.map(jnp.add, acc, (grads,) + parts), None

  zeros = (jax.tree.map(jnp.zeros_like, params), jnp.float32(0.0), jnp.float32(0.0),
           zero_stats(('counts', 'balance_loss', 'z_loss', 'entropy', 'dropped_frac')))
  (grads, ce, aux_loss, stats), _ = jax.lax.scan(body, zeros, (micro, keys))
  for s in stats.values():
    s['load'] = s['counts'] / jnp.maximum(jnp.sum(s['counts']), 1.0)
  return ce, total_targets, aux_loss, dict(aux_loss=aux_loss, moe=stats), grads
