"""Where the train state and batches live on the mesh (rules in moe_jax/sharding.py)."""
import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from moe_jax import sharding


def state_shardings(abstract_state, mesh, mesh_cfg):
  """TrainState of shardings: params by the logical rules, optimizer state
  mirroring them, the step replicated."""
  rules = sharding.rules_from_config(mesh_cfg)
  params = sharding.param_shardings(abstract_state.params, mesh, rules)
  opt_state = sharding.opt_state_shardings(abstract_state.opt_state, abstract_state.params,
                                           params)
  return abstract_state.replace(step=NamedSharding(mesh, P()), params=params,
                                opt_state=opt_state)


def batch_sharding(mesh, mesh_cfg, batch_size=None):
  """Batch split over the token-splitting mesh axes; a batch size that does not
  divide is a ConfigError."""
  return sharding.batch_sharding(mesh, sharding.rules_from_config(mesh_cfg), batch_size)


def put_batch(local_batch, batch_sharding_):
  """Global arrays from each process' slice of the batch (multi-host safe)."""
  return jax.tree.map(
      lambda x: jax.make_array_from_process_local_data(batch_sharding_, x), local_batch)
