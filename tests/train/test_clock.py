"""The training bar counts from the process's start (moe_jax/train/clock.py)."""
import io
import subprocess
import sys
import time

from moe_jax.train import clock


def test_process_start_is_before_the_first_import():
  """A process that sleeps 1 s before importing the module is 1 s old."""
  code = ('import time; time.sleep(1.0); from moe_jax.train import clock; '
          'print(time.time() - clock.process_start())')
  age = float(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                             check=True).stdout)
  assert 1.0 <= age < 10.0


def test_the_bar_counts_from_the_process_start():
  """From its first line on: no line says 00:00 (this process is older)."""
  out = io.StringIO()
  bar = clock.progress_bar(range(3), file=out)
  assert bar.format_dict['elapsed'] >= time.time() - clock.process_start() - 0.5
  assert list(bar) == [0, 1, 2]
  drawn = [l for l in out.getvalue().split('\r') if '/3 [' in l]
  assert drawn and not any('[00:00<' in l for l in drawn), drawn


def test_without_proc_the_clock_starts_at_import(tmp_path):
  assert clock.process_start(stat=str(tmp_path / 'none')) == clock._IMPORTED  # pylint: disable=protected-access
