"""model.cross_entropy='fused' is the loss the train step runs, in one batch,
in microbatches (gradient accumulation's scan) and chunk by chunk: its
equations are in the step's jaxpr. The reference path gives the same numbers
(tests/models/test_losses.py), so equal losses cannot tell which path ran;
the jaxpr can.

Under jax.grad the custom VJP is mostly gone from the jaxpr (its forward rule
is traced in, its backward rule makes the transpose; inside a rematerialized
chunk the primal is traced again), but every equation keeps the traceback of
where it was traced, and each of these passes through the line of
losses.token_cross_entropy that calls the fused loss."""
import functools
import inspect

import jax
import jax.numpy as jnp
import pytest

from moe_jax.models import config as model_config, losses, stacking, transformer
from moe_jax.train import optimizer, state as state_lib, step
from tests.train import tiny

_SOURCE, _START = inspect.getsourcelines(losses.token_cross_entropy)
# (file, line) of token_cross_entropy's call of the fused loss.
_CALL = {(losses.token_cross_entropy.__code__.co_filename, _START + i)
         for i, line in enumerate(_SOURCE) if 'fused_token_cross_entropy(' in line}


def _sub_jaxprs(value):
  if hasattr(value, 'eqns'):
    yield value
  elif hasattr(value, 'jaxpr') and hasattr(value.jaxpr, 'eqns'):
    yield value.jaxpr
  elif isinstance(value, (tuple, list)):
    for v in value:
      yield from _sub_jaxprs(v)


def _fused_equations(jaxpr):
  """Equations of `jaxpr` and every jaxpr inside it traced in the fused loss."""
  count = 0
  for eqn in jaxpr.eqns:
    frames = eqn.source_info.traceback.frames if eqn.source_info.traceback else ()
    count += any((f.file_name, f.line_num) in _CALL for f in frames)
    for value in eqn.params.values():
      count += sum(_fused_equations(sub) for sub in _sub_jaxprs(value))
  return count


def _step_jaxpr(cross_entropy, grad_accum_steps, loss_chunk):
  config = tiny.config(**{'model.cross_entropy': cross_entropy, 'model.loss_chunk': loss_chunk,
                          'moe.num_experts': 0, 'model.vocab_size': 61, 'batch_size': 4,
                          'seq_len': 16})
  cfg = model_config.from_config(config)
  model = transformer.Transformer(cfg)
  params = jax.eval_shape(lambda: stacking.stack(model.init(
      jax.random.key(0), jnp.zeros((1, config.seq_len), jnp.int32))['params'], cfg))
  tx, lr_fn = optimizer.make(config.opt, config.total_steps, params, 0)
  state = jax.eval_shape(lambda p: state_lib.create(p, tx), params)
  rows = jax.ShapeDtypeStruct((config.batch_size, config.seq_len), jnp.int32)
  batch = dict(inputs=rows, targets=rows, segment_ids=rows, positions=rows,
               loss_mask=jax.ShapeDtypeStruct(rows.shape, jnp.float32))
  fn = functools.partial(step.train_step, model=model, tx=tx, lr_fn=lr_fn, seed=0,
                         bias_update_rate=0.0, grad_accum_steps=grad_accum_steps)
  return jax.make_jaxpr(fn)(state, batch).jaxpr


@pytest.mark.parametrize('grad_accum_steps, loss_chunk', [(1, 0), (2, 0), (2, 16)],
                         ids=['one_batch', 'accumulated', 'accumulated_chunked'])
def test_the_step_runs_the_loss_it_is_configured_with(grad_accum_steps, loss_chunk):
  assert len(_CALL) == 1
  assert _fused_equations(_step_jaxpr('fused', grad_accum_steps, loss_chunk)) > 0
  assert _fused_equations(_step_jaxpr('reference', grad_accum_steps, loss_chunk)) == 0
