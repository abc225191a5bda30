"""The launcher (moe_jax.multiprocess.run) at its bounds: 1 and MAX_PROCESSES
processes run, 0 and MAX_PROCESSES + 1 are refused before anything starts;
and a process that exits 0 early is done, not a failure: the others run to
their end and no `error:` line is printed."""
import io

import pytest

from moe_jax import multiprocess
from moe_jax.errors import ConfigError

_ECHO_INDEX = ['sh', '-c', 'echo "$MOE_JAX_PROCESS_ID"']


def _run(command, processes):
  out, err = io.BytesIO(), io.StringIO()
  code = multiprocess.run(command, processes, out=out, err=err, poll_s=0.01)
  return code, out.getvalue().decode().splitlines(), err.getvalue()


@pytest.mark.parametrize('processes', [0, multiprocess.MAX_PROCESSES + 1])
def test_a_count_past_the_bounds_is_refused(processes, tmp_path):
  marker = tmp_path / 'started'
  with pytest.raises(ConfigError, match=rf'--processes={processes} must be between 1 and '
                                        rf'{multiprocess.MAX_PROCESSES}'):
    multiprocess.run(['touch', str(marker)], processes)
  assert not marker.exists()


def test_one_process_and_the_most_run():
  assert _run(['true'], 1) == (0, [], '')
  n = multiprocess.MAX_PROCESSES
  code, lines, err = _run(_ECHO_INDEX, n)
  assert (code, err) == (0, '')
  assert sorted(lines) == sorted(f'[{i}] {i}' for i in range(n))


def test_an_early_exit_with_status_0_is_not_a_failure():
  late = ['sh', '-c', 'if [ "$MOE_JAX_PROCESS_ID" = 1 ]; then sleep 0.5; echo late; fi']
  code, lines, err = _run(late, 2)
  assert (code, err) == (0, '')
  assert lines == ['[1] late']   # process 1 ran to its end after process 0 had exited 0
