"""The run's device mesh and where batches and params live on it (rules in
moe_jax/sharding.py). Training, evaluation and upcycling all place arrays
through here."""
import functools
import os

import jax

from moe_jax import sharding
from moe_jax.errors import ConfigError, RunError
from moe_jax.workdir import coordinator

# Set by moe_jax/multiprocess.py for each process it starts.
ENV_ADDRESS, ENV_COUNT, ENV_INDEX = ('MOE_JAX_COORDINATOR_ADDRESS', 'MOE_JAX_NUM_PROCESSES',
                                     'MOE_JAX_PROCESS_ID')


def _launcher_env():
  """(address, count, index) from the MOE_JAX_* variables, or None where
  MOE_JAX_COORDINATOR_ADDRESS is unset (no launcher started this process)."""
  address = os.environ.get(ENV_ADDRESS)
  if not address:
    return None
  numbers = []
  for name in (ENV_COUNT, ENV_INDEX):
    try:
      numbers.append(int(os.environ.get(name, '')))
    except ValueError:
      raise ConfigError(f'{name}={os.environ.get(name)!r} must be an integer') from None
  return (address, *numbers)


def process_count(mesh_cfg):
  """The run's process count as configured (mesh keys, else the launcher's
  MOE_JAX_* variables), without starting a backend: checks that run before
  `initialize` must not touch a device. 1 when nothing names one; JAX's
  count once jax.distributed has started (mesh.distributed's detection)."""
  if jax.distributed.is_initialized():
    return jax.process_count()
  env = _launcher_env()
  return max(mesh_cfg.num_processes or (env[1] if env else 0), 1)


def initialize(mesh_cfg):
  """Joins this process to a multi-process run; call it before anything
  touches a device (a backend started first cannot join).

  `mesh.coordinator_address`, `mesh.num_processes` and `mesh.process_id`
  name the run explicitly (set together); where all three are unset, the
  MOE_JAX_* variables `python -m moe_jax.multiprocess` sets stand in for
  them, so any entry point joins without new flags. `mesh.distributed=True`
  alone leaves them to JAX's detection of SLURM, Open MPI and Cloud TPU. CPU
  devices of several processes talk through gloo, which has to be chosen
  before the CPU backend starts. A process other than 0 first asks whether a
  coordinator listens at the address (coordinator.check: a one-line error
  within coordinator.ANSWER_S seconds where another program does); process 0
  whether the port is free (coordinator.check_free: JAX segfaults where not).
  """
  address = mesh_cfg.coordinator_address
  count, index = mesh_cfg.num_processes, mesh_cfg.process_id
  env = _launcher_env()
  if not address and count == 0 and index == -1 and env:
    address, count, index = env
  explicit = bool(address) or count != 0 or index != -1
  if not (explicit or mesh_cfg.distributed):
    return
  if explicit and not (address and count >= 1 and 0 <= index < count):
    raise ConfigError(f'mesh.coordinator_address={address!r}, mesh.num_processes={count}, '
                      f'mesh.process_id={index}: set all three, with 0 <= process_id < '
                      'num_processes')
  if jax.distributed.is_initialized():   # a notebook's second run
    return
  if explicit and index == 0:
    coordinator.check_free(address)
  platforms = jax.config.jax_platforms or ''
  if (count > 1 or not explicit) and (not platforms or 'cpu' in platforms.split(',')):
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  if explicit and index > 0:
    coordinator.check(address)
  try:
    if explicit:
      jax.distributed.initialize(address, count, index)
    else:
      jax.distributed.initialize()
  except (RuntimeError, ValueError) as e:   # XlaRuntimeError is a RuntimeError
    where = f'coordinator {address}' if explicit else 'the detected cluster'
    lines = str(e).strip().splitlines() or [type(e).__name__]
    raise RunError(f'jax.distributed.initialize with {where} failed: {lines[0]}') from None


def make_mesh(mesh_cfg):
  """The run's mesh: `sharding.make_mesh` over the first `mesh.num_devices`
  devices (0: all of them).

  Fewer devices than the host has is for one-process runs (a one-device
  baseline, a scaling benchmark, resuming on a smaller mesh); a multi-process
  mesh must span every process, so there it has to be all of them.
  """
  devices, n = jax.devices(), int(mesh_cfg.num_devices)
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
