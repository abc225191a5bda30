"""The XLA:CPU scheduler flag that rematerialization needs, set before the
backend starts; and `accepted`, whether this jaxlib knows a flag at all.

XLA:CPU orders a step's ops breadth-first by default
(--xla_cpu_enable_concurrency_optimized_scheduler=true, for concurrency): each
block's recomputation runs as early as it can, so what remat dropped is alive
again at the peak and `model.remat` frees nothing; the depth-first order (=false)
keeps remat's savings (docs/benchmarks.md, "Memory": 8x0.5b temporaries 174 GB
with any policy by default, 95 GB with remat=full under the flag). XLA reads
XLA_FLAGS once, when the first backend starts, and the flag cannot be passed per
compile (jax 0.10.2), so `python -m moe_jax.main` calls `for_remat` with the
run's config before anything has started a backend. It touches nothing when
XLA_FLAGS already names the flag (the user's choice stands), when remat is
'none', or when JAX_PLATFORMS leaves out the CPU; on GPU and TPU compiles the
flag is unread.
"""
import os
import subprocess
import sys

NAME = 'xla_cpu_enable_concurrency_optimized_scheduler'
FLAG = f'--{NAME}=false'
# XLA:CPU's legacy (LLVM IR) fusion emitters: tiny programs compile in about
# half the CPU time of the MLIR emitters (tests/conftest.py). Newer jaxlibs may
# not know the flag: ask `accepted` before setting it.
LEGACY_EMITTERS = '--xla_cpu_use_fusion_emitters=false'
# What for_remat did in this process: 'set', 'user' (XLA_FLAGS names the flag),
# 'late' (a backend had started), or '' (not needed / not called).
_done = {'action': ''}


def _backends_started():
  try:
    from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
    return xla_bridge.backends_are_initialized()
  except (ImportError, AttributeError):   # cannot tell: do not claim the flag took effect
    return True


def for_remat(remat, environ=None):
  """Adds FLAG to XLA_FLAGS for `remat` != 'none' where it is needed and can
  still act; returns what it did ('set', 'user', 'late' or '')."""
  environ = os.environ if environ is None else environ
  flags = environ.get('XLA_FLAGS', '')
  platforms = environ.get('JAX_PLATFORMS', '')
  if remat == 'none' or (platforms and 'cpu' not in platforms.split(',')):
    action = ''
  elif NAME in flags:
    action = 'user'
  elif _backends_started():
    action = 'late'
  else:
    environ['XLA_FLAGS'] = f'{flags} {FLAG}'.strip()
    action = 'set'
  if environ is os.environ:
    _done['action'] = action
  return action


def describe(remat):
  """The run summary's words on the flag (remat on a CPU backend), or ''."""
  if remat == 'none':
    return ''
  value = next((f.split('=', 1)[1] if '=' in f else 'true'
                for f in os.environ.get('XLA_FLAGS', '').split() if NAME in f), None)
  if _done['action'] == 'set':
    return f'XLA_FLAGS {FLAG} set by moe_jax.main: remat frees memory on XLA:CPU'
  if value is not None:
    saves = value.lower() in ('false', '0')
    return f'XLA_FLAGS --{NAME}={value}' + ('' if saves else ': remat frees no memory on XLA:CPU')
  return (f'XLA:CPU\'s default scheduler keeps what remat drops (remat frees no memory): '
          f'set XLA_FLAGS={FLAG} before the process starts')


def accepted(flag):
  """Whether this jaxlib's XLA accepts `flag` (e.g. '--xla_cpu_...=false'),
  asked of a probe process on the CPU backend: XLA aborts a process whose
  XLA_FLAGS names a flag it does not know, and flags come and go between
  versions. About a second, so callers ask once and pass the answer on in
  XLA_FLAGS."""
  env = dict(os.environ, XLA_FLAGS=flag, JAX_PLATFORMS='cpu')
  try:
    probe = subprocess.run([sys.executable, '-c', 'import jax; jax.devices()'], env=env,
                           capture_output=True, check=False, timeout=120)
  except subprocess.TimeoutExpired:   # a hung probe vouches for nothing
    return False
  return probe.returncode == 0
