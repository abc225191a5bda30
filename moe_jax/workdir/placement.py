"""The run's device mesh and where batches and params live on it (rules in
moe_jax/sharding.py). Training, evaluation and upcycling all place arrays
through here."""
import functools

import jax

from moe_jax import sharding
from moe_jax.errors import ConfigError


def make_mesh(mesh_cfg):
  """The run's mesh: `sharding.make_mesh` over the first `mesh.num_devices`
  devices (0: all of them).

  Fewer devices than the host has is for one-process runs (a one-device
  baseline, a scaling benchmark, resuming on a smaller mesh); a multi-process
  mesh must span every process, so there it has to be all of them.
  """
  devices, n = jax.devices(), int(mesh_cfg.get('num_devices', 0))
  if n < 0 or n > len(devices):
    raise ConfigError(f'mesh.num_devices={n} must be between 0 and the {len(devices)} devices')
  if n and n != len(devices) and jax.process_count() > 1:
    raise ConfigError(f'mesh.num_devices={n}: a multi-process run uses all '
                      f'{len(devices)} devices (set 0)')
  return sharding.make_mesh(mesh_cfg, devices[:n] if n else devices)


def on_mesh(mesh, fn):
  """`fn` called under `jax.set_mesh(mesh)`.

  Code that runs while `fn` is traced sees the mesh through
  `jax.sharding.get_abstract_mesh()`: the MoE block picks expert-parallel
  dispatch from it (moe_jax/models/dispatch.py). The mesh is part of jit's
  cache key, so a jitted `fn` is traced for it once.
  """
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with jax.set_mesh(mesh):
      return fn(*args, **kwargs)
  return wrapped


def batch_sharding(mesh, mesh_cfg, batch_size=None):
  """Batch split over the token-splitting mesh axes; a batch size that does not
  divide is a ConfigError."""
  return sharding.batch_sharding(mesh, sharding.rules_from_config(mesh_cfg), batch_size)


def put_batch(local_batch, batch_sharding_):
  """Global arrays from each process' slice of the batch (multi-host safe)."""
  return jax.tree.map(
      lambda x: jax.make_array_from_process_local_data(batch_sharding_, x), local_batch)


def param_shardings(abstract_params, mesh, mesh_cfg):
  """Params by the logical-axis rules of `mesh_cfg`."""
  return sharding.param_shardings(abstract_params, mesh, sharding.rules_from_config(mesh_cfg))
