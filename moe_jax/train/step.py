"""The jitted train step: a pure function of (state, batch)."""
import functools

import jax
import jax.numpy as jnp
import optax

from moe_jax.models import router, stacking
from moe_jax.train import accumulate


def moe_metrics(aux):
  """Per-MoE-layer health from the model's aux dict (docs/internals.md).

  cv is the coefficient of variation of the expert load (0 = perfectly
  balanced); dead counts experts that got no token in this batch; dead_1pct
  and healthy are seed 001's monitor (router.health: under 1% of the load;
  cv < 0.3 and every expert above 2%).
  """
  out = {}
  for name, layer in aux.get('moe', {}).items():
    load_E = layer['load']
    h = router.health(load_E)
    out[f'moe/{name}/load'] = load_E
    out[f'moe/{name}/cv'] = jnp.std(load_E) / jnp.maximum(jnp.mean(load_E), 1e-9)
    out[f'moe/{name}/dead'] = jnp.sum(layer['counts'] == 0)
    out[f'moe/{name}/dead_1pct'] = h['dead_1pct']
    out[f'moe/{name}/healthy'] = h['healthy'].astype(jnp.int32)
    for key in ('entropy', 'balance_loss', 'z_loss', 'dropped_frac'):
      out[f'moe/{name}/{key}'] = layer[key]
  return out


def train_step(state, batch, *, model, tx, lr_fn, seed, bias_update_rate, phases=None,
               grad_accum_steps=1):
  """One optimizer step; returns (new state, metrics of this step). The state
  is in the train layout (models/stacking.py: each scan column stacked under
  scan_layers). With `phases` (moe_jax/train/phases.py) the router losses
  take the weights of the step's phase. `grad_accum_steps` > 1 runs the batch
  as that many microbatches (moe_jax/train/accumulate.py), same update."""
  rng = jax.random.fold_in(jax.random.key(seed), state.step)

  if grad_accum_steps > 1:
    m = model.cfg.moe
    weights = (phases.loss_weights(state.step) if phases is not None
               else (m.balance_loss_weight, m.z_loss_weight))
    ce, count, aux_loss, aux, grads = accumulate.value_and_grad(
        model, state.params, batch, rng, grad_accum_steps, weights)
  else:
    def loss_fn(params):
      ce, count, aux = accumulate.loss_terms(model, params, batch, rng)
      aux_loss = (aux['aux_loss'] if phases is None else
                  phases.aux_loss(aux, state.step, model.cfg.moe.router_loss_reduction))
      return ce + aux_loss, (ce, count, aux_loss, aux)

    (_, (ce, count, aux_loss, aux)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  lr = lr_fn(state.step)
  params = optax.apply_updates(state.params, jax.tree.map(lambda u: lr * u, updates))
  if bias_update_rate:   # aux's per-layer counts in the params' layout (models/stacking.py)
    params = router.update_biases(params, {'moe': stacking.stack(aux['moe'], model.cfg)},
                                  bias_update_rate)
  metrics = dict(loss=ce, aux_loss=aux_loss, grad_norm=optax.tree.norm(grads),
                 param_norm=optax.tree.norm(params),
                 lr=lr, tokens=count, **moe_metrics(aux))
  if phases is not None:
    metrics['balance_weight'], metrics['z_loss_weight'] = phases.loss_weights(state.step)
  return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics


def jit_train_step(model, tx, lr_fn, config, state_shardings, batch_sharding, phases=None,
                   grad_accum_steps=None):
  step = functools.partial(
      train_step, model=model, tx=tx, lr_fn=lr_fn, seed=config.seed,
      bias_update_rate=config.moe.bias_update_rate if config.moe.use_bias else 0.0,
      phases=phases, grad_accum_steps=grad_accum_steps or accumulate.steps_for(
          config, model.cfg, batch_sharding))
  return jax.jit(step, in_shardings=(state_shardings, batch_sharding),
                 out_shardings=(state_shardings, None), donate_argnums=(0,))
