"""`python -m moe_jax.main`, reporting every file it writes: what the
multi-process tests start through the launcher.

  python -m tests.multihost.child --config=... --workdir=...

Each write (open for writing, os.open creating, a rename's destination) prints
`audit-write PATH` to stderr, so a test sees which process wrote what
(Orbax's array data, written by TensorStore, is not seen; its Python-side
files are). With MOE_JAX_TEST_KILL_AT=S, process 1 kills itself (SIGKILL)
when the batch of step S is placed; with MOE_JAX_TEST_TERM_AT=S, process 0
sends SIGTERM to its parent, the launcher, which passes it to every process.
"""
import builtins
import os
import runpy
import signal
import sys

from moe_jax.workdir import placement


def _report(path):
  if isinstance(path, (str, bytes, os.PathLike)):
    print(f'audit-write {os.path.abspath(os.fsdecode(path))}', file=sys.stderr, flush=True)


def _audit(module, name, path_arg, writes):
  original = getattr(module, name)

  def wrapped(*args, **kwargs):
    if writes(args, kwargs):
      _report(args[path_arg])
    return original(*args, **kwargs)
  setattr(module, name, wrapped)


def _signal_at(step, pid, signum):
  put, calls = placement.put_batch, []

  def put_then_signal(*args):
    calls.append(1)
    if len(calls) == step:
      os.kill(pid, signum)
    return put(*args)
  placement.put_batch = put_then_signal


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT
_audit(builtins, 'open', 0, lambda a, k: any(c in (a[1] if len(a) > 1 else k.get('mode', 'r'))
                                               for c in 'wax+'))
_audit(os, 'open', 0, lambda a, k: (a[1] if len(a) > 1 else k['flags']) & _WRITE_FLAGS)
_audit(os, 'replace', 1, lambda a, k: True)
_audit(os, 'rename', 1, lambda a, k: True)
_PROCESS = os.environ.get(placement.ENV_INDEX)
if os.environ.get('MOE_JAX_TEST_KILL_AT') and _PROCESS == '1':
  _signal_at(int(os.environ['MOE_JAX_TEST_KILL_AT']), os.getpid(), signal.SIGKILL)
if os.environ.get('MOE_JAX_TEST_TERM_AT') and _PROCESS == '0':
  _signal_at(int(os.environ['MOE_JAX_TEST_TERM_AT']), os.getppid(), signal.SIGTERM)
sys.argv[0] = 'moe_jax.main'
runpy.run_module('moe_jax.main', run_name='__main__', alter_sys=True)
