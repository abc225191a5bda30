"""experiments.gpu.run's bad input and interruptions: one `error:` line,
exit 2 (128 + N for a signal N), no traceback, before anything is written."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from experiments.gpu import run
from tests.robustness import harness


def _error(capsys, fn):
  """(exit status, stderr) of fn(), argparse's SystemExit included."""
  try:
    code = fn()
  except SystemExit as e:
    code = e.code
  return code, capsys.readouterr().err


@pytest.mark.parametrize('case, pattern', [
    ('a_file', r'--out=.*/f is not a directory'),
    ('under_a_file', r'--out=.*/f/sub: cannot write there \(Not a directory\)'),
    ('not_empty', r'--out=.*/full exists and is not empty'),
])
def test_refuses_an_out_it_cannot_use(tmp_path, capsys, case, pattern):
  (tmp_path / 'f').write_text('kept')
  (tmp_path / 'full').mkdir()
  (tmp_path / 'full' / 'x').write_text('kept')
  out = {'a_file': 'f', 'under_a_file': 'f/sub', 'not_empty': 'full'}[case]
  code, err = _error(capsys,
                     lambda: run.main(['--call=B', f'--out={tmp_path}/{out}', '--dry_run']))
  assert code == 2 and len(err.splitlines()) == 1, err
  assert err.startswith('error: ') and re.search(pattern, err), err
  assert sorted(os.listdir(tmp_path)) == ['f', 'full'] and (tmp_path / 'f').read_text() == 'kept'


def test_refuses_an_out_under_a_read_only_folder(read_only_dir, capsys):
  code, err = _error(capsys,
                     lambda: run.main(['--call=B', f'--out={read_only_dir}/new', '--dry_run']))
  assert code == 2 and err.startswith(f'error: --out={read_only_dir}/new: cannot write there')
  assert len(err.splitlines()) == 1 and not os.path.exists(f'{read_only_dir}/new')


@pytest.mark.parametrize('argv, message', [
    ([], 'error: the following arguments are required: --call, --out'),
    (['--call=B', '--out=x', '--bogus'], 'error: unrecognized arguments: --bogus'),
])
def test_argparse_errors_are_one_error_line(capsys, argv, message):
  code, err = _error(capsys, lambda: run.main(argv))
  assert code == 2 and err.splitlines() == [message]


def _children(pid):
  try:
    with open(f'/proc/{pid}/task/{pid}/children') as f:
      return f.read().split()
  except OSError:
    return []


def test_ctrl_c_is_one_line_and_no_traceback(tmp_path):
  proc = subprocess.Popen([sys.executable, '-m', 'experiments.gpu.run', f'--out={tmp_path}/o',
                           '--dry_run', '--call=B'], cwd=harness.REPO,
                          env=harness.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
  try:
    while not _children(proc.pid) and proc.poll() is None:   # its first command: the
      time.sleep(0.01)                                         # handlers are set
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
  finally:
    proc.kill()
  assert proc.returncode == 128 + signal.SIGINT
  assert err.splitlines() == ['error: stopped by SIGINT'], err
