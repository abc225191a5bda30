import os

import pytest


@pytest.fixture(scope='session')
def jax_cache(tmp_path_factory):
  """A JAX compilation cache for the runs the launcher tests start, shared by
  the test session's xdist workers: runs of one shape compile once."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    root = root.parent
  path = root / 'jax_cache'
  path.mkdir(exist_ok=True)
  return path
