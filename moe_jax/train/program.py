"""A Program: what training one model shape needs (model, optimizer, shardings,
jitted steps), and the state that goes with it. The trainer builds one per
shape: one for a plain run, a second after an in-run upcycle.

The train state has two layouts (models/stacking.py): the one the step
trains (each scan column stacked under `model.scan_layers`) and the
checkpoint's (`layers_{i}`), which everything outside the step reads. This
module converts between them: restoring, saving, growing and init_from.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from moe_jax import sharding
from moe_jax.eval import validation
from moe_jax.models import stacking, transformer
from moe_jax.models import config as model_config
from moe_jax.train import accumulate, optimizer, phases as phases_lib
from moe_jax.train import state as state_lib, step
from moe_jax.upcycle import mapping, recipes, transition
from moe_jax.workdir import checkpoint, placement


@dataclasses.dataclass
class Program:
  """What one model shape needs to train: rebuilt after an in-run upcycle."""
  config: object
  model: object
  tx: object
  lr_fn: object
  abstract_state: object     # the train layout, with shardings
  state_shardings: object
  checkpoint_state: object   # the checkpoint layout (layers_{i}), with shardings
  batch_sharding: object
  grad_accum_steps: int    # microbatches per step, resolved (accumulate.steps)
  train_step: object
  eval_step: object
  to_train: object           # TrainState: checkpoint layout -> train layout (jitted)
  to_checkpoint: object      # and back


def build(config, mesh, start_step=0):
  cfg = model_config.from_config(config)
  model = transformer.Transformer(cfg)
  stack, unstack = (functools.partial(f, cfg=cfg) for f in (stacking.stack, stacking.unstack))
  abstract_params = jax.eval_shape(stack, transformer.abstract_params(model, config.seq_len))
  # Phases start at the in-run upcycle: config.upcycle.step before it, start_step after.
  phases = phases_lib.build(config, start_step or config.upcycle.step)
  tx, lr_fn = optimizer.make(config.opt, config.total_steps, abstract_params, start_step,
                             phases.lr_scale if phases else None)
  abstract_state = jax.eval_shape(lambda p: state_lib.create(p, tx), abstract_params)
  checkpoint_state = jax.eval_shape(unstack, abstract_state)
  checkpoint_shardings = _state_shardings(checkpoint_state, mesh, config.mesh)
  state_shardings = stacking.stack(checkpoint_shardings, cfg, combine=stacking.sharding)
  # Restores land on this mesh, whatever mesh wrote the checkpoint.
  abstract_state = checkpoint.abstract_like(abstract_state, state_shardings)
  checkpoint_state = checkpoint.abstract_like(checkpoint_state, checkpoint_shardings)
  to_train, to_checkpoint = ((jax.jit(stack, out_shardings=state_shardings),
                              jax.jit(unstack, out_shardings=checkpoint_shardings))
                             if cfg.scan_layers else (lambda s: s, lambda s: s))
  batch_sharding = placement.batch_sharding(mesh, config.mesh, config.batch_size)
  accum = accumulate.steps_for(config, cfg, batch_sharding)
  return Program(
      config, model, tx, lr_fn, abstract_state, state_shardings, checkpoint_state,
      batch_sharding, accum,
      placement.on_mesh(mesh, step.jit_train_step(model, tx, lr_fn, config, state_shardings,
                                                  batch_sharding, phases, accum)),
      placement.on_mesh(mesh, validation.jit_eval_step(model, state_shardings.params,
                                                       batch_sharding, unstack)),
      placement.on_mesh(mesh, to_train), placement.on_mesh(mesh, to_checkpoint))


def _state_shardings(abstract_state, mesh, mesh_cfg):
  """TrainState of shardings: params by the logical rules, optimizer state
  mirroring them, the step replicated."""
  params = placement.param_shardings(abstract_state.params, mesh, mesh_cfg)
  opt_state = sharding.opt_state_shardings(abstract_state.opt_state, abstract_state.params,
                                           params)
  return abstract_state.replace(step=NamedSharding(mesh, P()), params=params,
                                opt_state=opt_state)


def init_state(program, seed, params=None):
  """A fresh train state: params drawn from `seed`, or `params` (the
  checkpoint layout: init_from, a params-only checkpoint) with a fresh
  optimizer state."""
  model, tx, cfg = program.model, program.tx, program.model.cfg
  tokens = jnp.zeros((1, program.config.seq_len), jnp.int32)

  def init(params):
    if params is None:
      params = model.init(jax.random.key(seed), tokens)['params']
    return state_lib.create(stacking.stack(params, cfg), tx)

  return jax.jit(init, out_shardings=program.state_shardings)(params)


def restore_state(program, manager, step_):
  """(state, data position, the config the checkpoint was saved under) of a
  workdir checkpoint; a params-only one (from the upcycle CLI) gets a fresh
  optimizer state."""
  abstract = program.checkpoint_state
  out = manager.restore(step_, abstract.params, abstract.opt_state)
  if out['opt_state'] is None:
    state = init_state(program, None, out['params']).replace(step=jnp.asarray(step_, jnp.int32))
  else:
    state = program.to_train(state_lib.TrainState(jnp.asarray(step_, jnp.int32), out['params'],
                                                  out['opt_state']))
  return state, out['data'], out['meta'].get('config')


def evaluate(program, params, batches):
  return validation.mean_loss(program.eval_step, params, batches, program.batch_sharding)


def upcycle(program, dst_config, state, mesh, batches=(), report_batches=(),
            say=lambda message: None, source=''):
  """The in-run transition at the current step (seed 000's upcycle at tau):
  transition.grow of the one in-memory source (`source`: the run's workdir,
  for the report) with the training `batches` its recipe reads
  (transition.batches_needed).

  Returns the target Program, the grown state (params by the recipe, the
  optimizer state by its policy) and the transition.Growth (its reports,
  none without `report_batches`; its recipe; its record, the report the
  trainer writes). The transition reads and writes the checkpoint layout.
  `say(message)` hears each phase that compiles before it starts.

  Its programs, each compiled once (tests/train/test_transition_compiles.py
  holds the list): the old state into the checkpoint layout (`unstack`,
  under scan_layers), the recipe's rules (`transform`), the preservation
  report's two forwards (`compare`, with report batches), and the optimizer
  state by its policy together with the grown state's train layout
  (`grown_state`); a recipe's `prepare` may add its own (utility, on
  batches). No eager op runs between them: each would compile a program.
  """
  if program.model.cfg.scan_layers:
    say('the train state into the checkpoint layout')
  new = build(dst_config, mesh, start_step=int(state.step))
  old, target = program.to_checkpoint(state), new.checkpoint_state
  growth = transition.grow(program.config, dst_config,
                           [recipes.Input(program.config, old.params, tuple(batches), source,
                                          int(state.step))],
                           [report_batches] if report_batches else None,
                           _shardings(target.params), say)
  stack = functools.partial(stacking.stack, cfg=new.model.cfg)

  def grown_state(step_, params, opt_state):
    # The moments by the recipe's rules and the layout the grown step trains,
    # in one program: the stacked state is all the trainer keeps.
    opt_state = mapping.map_opt_state(growth.recipe, opt_state, target.opt_state, target.params,
                                      growth.recipe.opt_policy)
    return stack(state_lib.TrainState(step_, params, opt_state))

  say(f'the optimizer state by {growth.recipe.opt_policy!r} and the grown train layout')
  grown = placement.on_mesh(mesh, jax.jit(grown_state, out_shardings=new.state_shardings))(
      state.step, growth.params, old.opt_state)
  return new, grown, growth


def _shardings(abstract):
  return jax.tree.map(lambda a: a.sharding, abstract)
