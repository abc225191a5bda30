"""Test setup: 8 fake CPU devices, set before JAX initialises its backends, and
the compilation cache of the processes tests start."""
import os

import pytest

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')


@pytest.fixture(scope='session')
def jax_cache(tmp_path_factory):
  """A JAX compilation cache for the processes tests start (launcher runs,
  notebook kernels), shared by the session's xdist workers: programs of one
  shape compile once."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    root = root.parent
  path = root / 'jax_cache'
  path.mkdir(exist_ok=True)
  return path
