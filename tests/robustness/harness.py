"""Driving CLIs in child processes, and checking that a refusal wrote nothing."""
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(REPO, 'configs')


@dataclasses.dataclass
class Result:
  rc: int
  stdout: str
  stderr: str
  seconds: float = 0.0


def env():
  return dict(os.environ, PYTHONPATH=REPO)


class ForkServer:
  """A client of tests/robustness/forkserver.py."""

  def __init__(self):
    self._proc = subprocess.Popen([sys.executable, '-m', 'tests.robustness.forkserver'],
                                  cwd=REPO, env=env(), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

  def run(self, module, *argv, cwd=REPO, timeout=120, prelude=''):
    request = dict(module=module, argv=list(argv), cwd=str(cwd), timeout=timeout,
                   prelude=prelude)
    self._proc.stdin.write(json.dumps(request) + '\n')
    self._proc.stdin.flush()
    line = self._proc.stdout.readline()
    if not line:
      raise RuntimeError('the fork server died')
    return Result(**json.loads(line))

  def close(self):
    self._proc.stdin.close()
    self._proc.wait(timeout=30)


def subprocess_run(module, *argv, cwd=REPO, timeout=300):
  """The slow reference: a fresh interpreter, `python -m module argv...`."""
  proc = subprocess.run([sys.executable, '-m', module, *argv], cwd=cwd, env=env(),
                        capture_output=True, text=True, timeout=timeout, check=False)
  return Result(proc.returncode, proc.stdout, proc.stderr)


def tree_digest(*roots):
  """A digest of every name, mode, link target and byte under `roots`."""
  h = hashlib.sha256()
  for root in roots:
    root = str(root)
    if not os.path.lexists(root):
      h.update(b'absent:' + root.encode())
      continue
    for directory, dirs, names in os.walk(root):
      dirs.sort()
      for name in sorted(dirs + names):
        path = os.path.join(directory, name)
        st = os.lstat(path)
        h.update(f'{os.path.relpath(path, root)}:{st.st_mode}\n'.encode())
        if os.path.islink(path):
          h.update(os.readlink(path).encode())
        elif os.path.isfile(path):
          with open(path, 'rb') as f:
            h.update(hashlib.sha256(f.read()).digest())
  return h.hexdigest()


def assert_one_error_line(result, rc, pattern):
  """Exit status `rc`, stderr exactly one `error: ...` line matching `pattern`
  (a regex), no traceback, nothing on stdout."""
  lines = result.stderr.strip().splitlines()
  where = f'rc={result.rc}\nstdout={result.stdout!r}\nstderr:\n{result.stderr}'
  assert result.rc == rc, where
  assert 'Traceback' not in result.stderr, where
  assert len(lines) == 1 and lines[0].startswith('error: '), where
  assert re.search(pattern, lines[0]), f'{pattern!r} not in {lines[0]!r}'
  assert result.stdout == '', where
