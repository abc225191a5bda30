"""Runs entry points as forked child processes of one warm interpreter.

The robustness suite drives each CLI over a table of bad inputs. A fresh
`python -m moe_jax.main` pays ~2 s of imports (JAX, Flax, Orbax, grain) before
it can refuse anything; this server pays them once, then forks a child per
request. A child is a real process of its own: it runs the entry module as
`__main__` (runpy, so its flags are defined fresh), with its own argv, working
directory, stdout/stderr files and exit status. The server never initialises
a JAX backend (only imports), so forking it is safe; each child starts its own.
tests/robustness/test_forkserver.py holds it to plain subprocesses.

Protocol: one JSON request per stdin line {module, argv, cwd, timeout,
prelude}, one JSON reply per stdout line {rc, stdout, stderr, seconds}.
`prelude` is Python the child runs first: the fault tests' hooks (a kill in
the middle of a write), which live in the tests, never in the package.
"""
import atexit
import json
import os
import runpy
import signal
import sys
import tempfile
import time
import traceback

# What the entry points import, warm in the server (never their __main__
# modules, which define absl flags).
import absl.app  # noqa: F401  pylint: disable=unused-import
import ml_collections.config_flags  # noqa: F401  pylint: disable=unused-import
import moe_jax.cli  # noqa: F401  pylint: disable=unused-import
import moe_jax.eval.validation  # noqa: F401  pylint: disable=unused-import
import moe_jax.scaling_laws.collect  # noqa: F401  pylint: disable=unused-import
import moe_jax.scaling_laws.fit  # noqa: F401  pylint: disable=unused-import
import moe_jax.train.trainer  # noqa: F401  pylint: disable=unused-import
import moe_jax.upcycle.run  # noqa: F401  pylint: disable=unused-import


def _child(request, out_path, err_path):
  """Runs in the forked child; never returns."""
  code = 1
  try:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(os.open(out_path, os.O_WRONLY), 1)
    os.dup2(os.open(err_path, os.O_WRONLY), 2)
    os.chdir(request['cwd'])
    sys.argv = [request['module']] + request['argv']
    # Ctrl-C raises KeyboardInterrupt, as in a run started from a terminal,
    # even when the suite runs as a background job (no job control), whose
    # SIGINT is ignored and stays ignored through fork and exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
      exec(request.get('prelude') or '', {})  # pylint: disable=exec-used
      runpy.run_module(request['module'], run_name='__main__', alter_sys=True)
      code = 0
    except SystemExit as e:
      if e.code is None or isinstance(e.code, int):
        code = e.code or 0
      else:
        print(e.code, file=sys.stderr)
    except BaseException:  # pylint: disable=broad-except
      traceback.print_exc()
    atexit._run_exitfuncs()  # pylint: disable=protected-access  # as a normal exit would
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access


def _run(request):
  # mkstemp, not a TemporaryDirectory: the child runs atexit functions, which
  # would remove a TemporaryDirectory of the server's.
  out_fd, out_path = tempfile.mkstemp(prefix='forkserver-out-')
  err_fd, err_path = tempfile.mkstemp(prefix='forkserver-err-')
  os.close(out_fd)
  os.close(err_fd)
  sys.stdout.flush()
  start = time.monotonic()
  pid = os.fork()
  if pid == 0:
    _child(request, out_path, err_path)
  deadline = start + request.get('timeout', 120)
  while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
      break
    if time.monotonic() > deadline:
      os.kill(pid, signal.SIGKILL)
      _, status = os.waitpid(pid, 0)
      break
    time.sleep(0.005)
  seconds = time.monotonic() - start
  outputs = []
  for path in (out_path, err_path):
    with open(path, errors='replace') as f:
      outputs.append(f.read())
    os.remove(path)
  return dict(rc=os.waitstatus_to_exitcode(status), stdout=outputs[0], stderr=outputs[1],
              seconds=seconds)


def main():
  for line in sys.stdin:
    print(json.dumps(_run(json.loads(line))), flush=True)


if __name__ == '__main__':
  main()
