"""Children that die with the process that started them, however it dies.

A launcher that is sent SIGKILL runs no handler and no `finally`: whatever it
started runs on, reparented to init. Linux's PR_SET_PDEATHSIG has the kernel
send a signal to the child the moment its parent dies, so `preexec()` as a
Popen's preexec_fn makes SIGKILL to a launcher reach its children too. The
"parent" is the thread that started the child: start children from the
thread that lives as long as the launcher (the main thread here). It is not
inherited by the child's own children: each launcher in a chain (launch ->
run driver -> trainer) sets it on its own. Elsewhere than Linux, a no-op.
"""
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def _prctl():
  if not sys.platform.startswith('linux'):
    return None
  try:
    return ctypes.CDLL(None, use_errno=True).prctl
  except (OSError, AttributeError):
    return None


_PRCTL = _prctl()   # looked up before any fork: the child only calls it


def preexec(signum=signal.SIGKILL):
  """A Popen preexec_fn: the child gets `signum` once its parent is gone; a
  parent that died before the child could ask (a race) makes it exit at once."""
  parent = os.getpid()

  def die_with_parent():
    if _PRCTL is not None:
      _PRCTL(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    if os.getppid() != parent:
      os._exit(128 + int(signum))

  return die_with_parent
