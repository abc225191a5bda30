"""The GPU script's commands (experiments/gpu/run.py): each runs in its own
process group, dies with the script (PR_SET_PDEATHSIG), and has its output
stamped line by line into a log with the seconds since it started and the UTC
time (`_pump`), so a silent minute shows as a gap between two stamps. A
command past its time gets SIGABRT first, so Python's faulthandler prints
where each thread was (`abort_trace`). No JAX here."""
import codecs
import ctypes
import datetime
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# After SIGABRT, how long faulthandler gets to print before SIGKILL.
_ABORT_GRACE_S = 20
_LIVE = set()   # the process groups running now: `kill_all` ends them


def _die_with_parent():
  """A command must not outlive this script: Linux sends it SIGKILL when the
  script dies, however (PR_SET_PDEATHSIG)."""
  if sys.platform.startswith('linux'):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # 1: PR_SET_PDEATHSIG


def kill_all():
  """SIGKILL to every running command's process group."""
  for pid in list(_LIVE):
    os.killpg(pid, signal.SIGKILL)


def _stamp(started, t):
  wall = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime('%H:%M:%S')
  return f'[{t - started:7.1f} s {wall}] '


def _pump(fd, log, started, raw):
  """Copies a command's output into the file `log` a line at a time, each
  stamped (`_stamp`) with when its first byte arrived, and keeps the text in
  `raw` (a list). tqdm redraws its bar after a '\r', not a newline: each
  redraw becomes a line of its own, stamped when it was drawn, not when the
  next one ended it (a bar's last line before a silent minute would
  otherwise carry the minute's end)."""
  decode = codecs.getincrementaldecoder('utf-8')(errors='replace')
  line, line_t = '', None
  with open(log, 'w') as f:
    def emit(text, t):
      if text:
        f.write(_stamp(started, t) + text + '\n')
        f.flush()
    while True:
      chunk = os.read(fd, 65536)
      text = decode.decode(chunk, final=not chunk)
      raw.append(text)
      now = time.time()
      for ch in text:
        if ch in '\r\n':
          emit(line, line_t)
          line, line_t = '', None
        else:
          line_t = now if line_t is None else line_t
          line += ch
      if not chunk:
        emit(line, line_t)
        return


def run(cmd, timeout, env, log):
  """Runs cmd (a list) in its own process group, its output stamped line by
  line into the file `log` (`_pump`); {cmd, env, rc, seconds, timed_out,
  stdout, tail} (`stdout` the raw output, `tail` the log's end)."""
  os.makedirs(os.path.dirname(log), exist_ok=True)
  started, t0 = time.time(), time.monotonic()
  proc = subprocess.Popen(cmd, cwd=_REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, start_new_session=True,
                          preexec_fn=_die_with_parent)
  _LIVE.add(proc.pid)
  raw = []
  pump = threading.Thread(target=_pump, args=(proc.stdout.fileno(), log, started, raw),
                          daemon=True)
  pump.start()
  try:
    proc.wait(timeout=timeout)
    timed_out = False
  except subprocess.TimeoutExpired:
    # faulthandler (PYTHONFAULTHANDLER, run.py's `_env`) prints every thread's stack
    # on SIGABRT: a timed-out command says where it was stuck.
    os.killpg(proc.pid, signal.SIGABRT)
    try:
      proc.wait(timeout=_ABORT_GRACE_S)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
    timed_out = True
  _LIVE.discard(proc.pid)
  pump.join(timeout=_ABORT_GRACE_S)   # a grandchild may hold the pipe: never wait on it long
  proc.stdout.close()
  out = ''.join(raw)
  result = dict(cmd=shlex.join(['python', *cmd[1:]]),
                env={k: v for k, v in env.items()
                     if k != 'PYTHONPATH' and os.environ.get(k) != v},
                rc=proc.returncode, timed_out=timed_out,
                seconds=round(time.monotonic() - t0, 1), stdout=out, tail=tail(log))
  if timed_out and 'Fatal Python error' in out:
    result['abort_trace'] = out[out.rindex('Fatal Python error'):][:6000]
  return result


def tail(log):
  with open(log) as f:
    return f.read()[-1500:]
