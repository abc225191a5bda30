"""TensorStore completing a write after Orbax closed the save's event loop
(what a really full disk does, by chance, in test_faults), made to happen
every time: the entry points print nothing for it, and still print other
unraisable errors."""
import subprocess
import sys

from tests.robustness import harness

# An entry point whose "save" fails while a TensorStore future is still
# awaited; the loop is closed, then the future completes, and its callback
# into the closed loop raises inside TensorStore (PyErr_WriteUnraisable).
_SCRIPT = '''
import asyncio
import gc
import tensorstore as ts
from moe_jax import cli

def main(argv):
  promise, future = ts.Promise.new()
  async def write():
    await future
  async def fail():
    raise OSError(28, 'No space left on device')
  async def save():
    await asyncio.gather(write(), fail())
  loop = asyncio.new_event_loop()
  try:
    loop.run_until_complete(save())
  except OSError:
    pass
  loop.close()
  promise.set_result(None)
  class Other:
    def __del__(self):
      raise ValueError('another unraisable error')
  Other()
  gc.collect()
  print('done')

cli.run_app(main)
'''


def test_completions_into_a_closed_loop_print_nothing():
  proc = subprocess.run([sys.executable, '-c', _SCRIPT], env=harness.env(), capture_output=True,
                        text=True, timeout=120, check=False)
  assert proc.returncode == 0 and proc.stdout == 'done\n', proc.stderr
  assert 'Event loop is closed' not in proc.stderr, proc.stderr
  assert 'ValueError: another unraisable error' in proc.stderr, proc.stderr
