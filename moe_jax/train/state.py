"""The training state: everything a step reads and writes, as one pytree."""
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class TrainState:
  step: jax.Array     # int32 scalar: number of optimizer steps taken
  params: Any         # plain nested dict, paths as in docs/internals.md
  opt_state: Any      # optax state; leaves that mirror params share their sharding


def create(params, tx, step=0):
  return TrainState(step=jnp.asarray(step, jnp.int32), params=params,
                    opt_state=tx.init(params))
