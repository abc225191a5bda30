"""Test setup: 8 fake CPU devices and one persistent compilation cache per
session, both set before JAX initialises its backends.

Most tests build the same tiny models again and again (a new trainer, a new
jit, the same program), in this process or in the processes they start; the
cache compiles each program once per session. The pytest process that starts
the session makes the directory, its xdist workers and every process a test
starts inherit it, and it is removed when the session ends. A size limit
turns on the cache's file lock, so processes in parallel never read a
half-written entry.
"""
import atexit
import os
import pathlib
import shutil
import tempfile

import pytest

# Appended, so that flags of the caller's (--xla_cpu_max_isa=AVX2, as
# fresh-clone-check --avx2 sets, a stand-in for another CPU) keep the 8 devices.
if 'xla_force_host_platform_device_count' not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = ' '.join(
      [os.environ.get('XLA_FLAGS', ''), '--xla_force_host_platform_device_count=8']).strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# `with mesh:` is deprecated (jax.set_mesh replaces it): make it raise in every
# test and every process a test starts, where the static check of
# tests/test_deprecations.py cannot see it.
os.environ.setdefault('JAX_DISALLOW_MESH_CONTEXT_MANAGER', '1')
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  _cache = tempfile.mkdtemp(prefix='moe_jax_tests_jax_cache_')
  atexit.register(shutil.rmtree, _cache, ignore_errors=True)
  os.environ.update(JAX_COMPILATION_CACHE_DIR=_cache, JAX_COMPILATION_CACHE_MAX_SIZE=str(2**30),
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0.1')


@pytest.fixture(scope='session')
def jax_cache():
  """The session's compilation cache, for the environment of processes tests
  start with an environment of their own (launcher runs, notebook kernels)."""
  return pathlib.Path(os.environ['JAX_COMPILATION_CACHE_DIR'])
