"""When this process started, so the training bar counts from there.

A bar that starts its clock at step 0 hides what came before it: imports, the
backend's start (CUDA's, on a GPU) and the first step's compile. The first H200
call printed step 1 at 36 s with no way to tell those apart, and a later
silence could not be placed (docs/benchmarks/gpu.md, 2026-11-28). Counting
from the process's start puts them on the bar's clock.
"""
import os
import time

import tqdm

_IMPORTED = time.time()


def process_start(stat='/proc/self/stat', uptime='/proc/uptime'):
  """The wall time (time.time()) this process started: from the kernel's
  start tick on Linux, else when this module was first imported."""
  try:
    with open(stat) as f:
      # Field 22, counted after the parenthesised name (which may hold spaces).
      ticks = int(f.read().rsplit(')', 1)[1].split()[19])
    with open(uptime) as f:
      up = float(f.read().split()[0])
  except (OSError, ValueError, IndexError):
    return _IMPORTED
  return time.time() - (up - ticks / os.sysconf('SC_CLK_TCK'))


def progress_bar(iterable, **kwargs):
  """tqdm.tqdm(iterable, **kwargs) whose elapsed time counts from the
  process's start, its first line drawn with that clock."""
  # A delay keeps tqdm from drawing its first line before the clock is set.
  bar = tqdm.tqdm(iterable, delay=1e-3, **kwargs)
  if not bar.disable:   # another process's bar: nothing drawn, no clock
    bar.start_t = min(bar.start_t, process_start())
    bar.refresh()
  return bar
