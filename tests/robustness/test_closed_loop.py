"""What a really full disk and a damaged checkpoint do, by chance, in
test_faults, made to happen every time: TensorStore completing a write after
Orbax closed the save's event loop, asyncio reporting the save's failed writes
nobody retrieved, and a restore's abandoned reads failing as they are closed.
The entry points print nothing for these, and still print other errors."""
import subprocess
import sys

from tests.robustness import harness


def _stderr_of(script, *args):
  """What `script`, an entry point that prints 'done' and exits 0, wrote to stderr."""
  proc = subprocess.run([sys.executable, '-c', script, *map(str, args)], env=harness.env(),
                        capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 0 and proc.stdout == 'done\n', proc.stderr
  return proc.stderr


# The head of an entry point that loads, as `fake_orbax`, the module whose path
# is its first argument: a file under a directory named orbax, as Orbax's are.
_LOAD_FAKE_ORBAX = '''
import gc
import importlib.util
import sys
from moe_jax import cli

spec = importlib.util.spec_from_file_location('fake_orbax', sys.argv.pop(1))
fake_orbax = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fake_orbax)
'''


def _fake_orbax(tmp_path, source):
  module = tmp_path / 'site' / 'orbax' / 'fake_orbax.py'
  module.parent.mkdir(parents=True)
  module.write_text(source)
  return module


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
  stderr = _stderr_of(_SCRIPT)
  assert 'Event loop is closed' not in stderr, stderr
  assert 'ValueError: another unraisable error' in stderr, stderr


# A save's writes that failed after the save was already given up: asyncio
# logs each unretrieved task's error with the coroutine's file, here a module
# under a directory named orbax (as Orbax's own are).
_UNRETRIEVED = _LOAD_FAKE_ORBAX + '''
import asyncio

async def ours():
  raise ValueError('a failure of our own')

def main(argv):
  loop = asyncio.new_event_loop()
  tasks = [loop.create_task(fake_orbax.write_fragment()), loop.create_task(ours())]
  loop.run_until_complete(asyncio.sleep(0.01))
  loop.close()
  del tasks
  gc.collect()
  print('done')

cli.run_app(main)
'''


def test_unretrieved_orbax_writes_print_nothing(tmp_path):
  module = _fake_orbax(tmp_path, "async def write_fragment():\n"
                                  "  raise ValueError('RESOURCE_EXHAUSTED: No space left on device')\n")
  stderr = _stderr_of(_UNRETRIEVED, module)
  assert 'RESOURCE_EXHAUSTED' not in stderr, stderr
  assert 'a failure of our own' in stderr, stderr


# A restore's reads abandoned after another read failed: each is a coroutine
# suspended at an await, which catches BaseException (as Orbax's
# _read_array_index_and_device_put does), so closing it when it is collected
# raises a new Exception instead of GeneratorExit.
_ABANDONED = _LOAD_FAKE_ORBAX + '''
class Pending:
  def __await__(self):
    yield

async def ours():
  try:
    await Pending()
  except BaseException:
    raise Exception('a read of our own')

def main(argv):
  for read in (fake_orbax.read_index(Pending), ours()):
    read.send(None)   # suspended at its await, never resumed
  gc.collect()
  print('done')

cli.run_app(main)
'''


def test_abandoned_orbax_reads_print_nothing(tmp_path):
  module = _fake_orbax(tmp_path, "async def read_index(pending):\n"
                                  "  try:\n"
                                  "    await pending()\n"
                                  "  except BaseException:\n"
                                  "    raise Exception('Encountered error while reading array index')\n")
  stderr = _stderr_of(_ABANDONED, module)
  assert 'reading array index' not in stderr, stderr
  assert 'a read of our own' in stderr, stderr
