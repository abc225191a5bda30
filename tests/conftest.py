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

from moe_jax import xla_flags

# Each appended unless the caller's XLA_FLAGS name it, so that flags of the
# caller's (--xla_cpu_max_isa=AVX2, as fresh-clone-check --avx2 sets, a
# stand-in for another CPU) keep them:
#  - 8 fake CPU devices, for the mesh tests;
#  - LLVM without its expensive passes, at -O0: the suite's programs are tiny,
#    so compiling, not running, is most of its time, and these halve a
#    compile (tests/train/test_memory_paths.py's step: 8.4 -> 4.7 s on 2
#    cores). They change how XLA:CPU's kernels are optimised, not what they
#    compute; no test times anything.
#  - the legacy (LLVM IR) fusion emitters, where this jaxlib still has them:
#    they compile the suite's programs in about half the CPU time of the MLIR
#    ones (three tiny train steps of tests/train/test_memory_paths.py: 23.4 ->
#    12.1 s of CPU; the same losses). A jaxlib without the flag would abort
#    on it, so a probe process asks first (xla_flags.accepted); xdist workers
#    and the processes tests start inherit the answer in XLA_FLAGS.
_TEST_FLAGS = ('--xla_force_host_platform_device_count=8', '--xla_backend_optimization_level=0',
               '--xla_llvm_disable_expensive_passes=true')
_flags = os.environ.get('XLA_FLAGS', '')
_missing = [flag for flag in _TEST_FLAGS if flag.split('=')[0] not in _flags]
_emitters = xla_flags.LEGACY_EMITTERS
if _emitters.split('=')[0] not in _flags and xla_flags.accepted(_emitters):
  _missing.append(_emitters)
os.environ['XLA_FLAGS'] = ' '.join([_flags] + _missing).strip()
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
