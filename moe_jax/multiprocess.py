r"""N processes of one run on this machine: what a cluster does, on localhost.

  python -m moe_jax.multiprocess --processes=2 [--devices_per_process=2] -- \
      python -m moe_jax.main --config=configs/lm_moe.py:tiny --workdir=DIR

Starts the command N times, process i with MOE_JAX_COORDINATOR_ADDRESS,
MOE_JAX_NUM_PROCESSES and MOE_JAX_PROCESS_ID in its environment (read by
`placement.initialize` where the mesh.coordinator_address / num_processes /
process_id keys are unset; the coordinator is a free port of localhost), and
with --devices_per_process, that many CPU devices
(--xla_force_host_platform_device_count). Every output line is prefixed with
`[i] `.

A dead process leaves the others waiting in a collective until JAX's own
heartbeat gives up (100 s by default, then an abort with a long report), so
this launcher is the watchdog: once one process exits non-zero (or is
killed), the others get SIGTERM and, --grace_s seconds later, SIGKILL; it
prints one `error:` line on stderr naming the process and exits with that
process's status (128 + N for a signal N). SIGTERM, SIGHUP or Ctrl-C to the
launcher stops its start loop at once and is passed to every process once
(the trainer saves a checkpoint and exits); processes still running
--stop_grace_s seconds later (default 120: time to save a checkpoint), or at
a second such signal, get SIGKILL.

No process outlives the launcher. Each process leads a process group of its
own, and every signal goes to the whole group, so what a process started
(a shell's children) stops with it; on its way out the launcher SIGKILLs
whatever is left of each group. Killed itself with SIGKILL, it cannot: a
guardian process it starts first, in a session of its own (so SIGKILL to
the launcher's whole group spares it), watches a pipe from the launcher,
which tells it each group, and SIGKILLs every group once the pipe closes
without a `done`. Each process also dies with the launcher on its own
(lifeline.py: PR_SET_PDEATHSIG). At most MAX_PROCESSES processes: more is a
typo, not a run on one machine.
"""
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from absl import flags

from moe_jax import cli, lifeline
from moe_jax.errors import ConfigError
from moe_jax.workdir.placement import ENV_ADDRESS, ENV_COUNT, ENV_INDEX

_DEVICES_FLAG = '--xla_force_host_platform_device_count'
MAX_PROCESSES = 64
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The guardian: SIGKILLs every process group it was told of once its stdin
# closes without a `done` line (the launcher was killed); immune to the
# signals the launcher passes on, so only the pipe decides.
_GUARDIAN = f"""
import os, signal, sys
for s in {[int(s) for s in _STOP_SIGNALS]}:
  signal.signal(s, signal.SIG_IGN)
groups = []
for line in sys.stdin:
  if line.strip() == 'done':
    sys.exit(0)
  groups.append(int(line))
for group in groups:
  try:
    os.killpg(group, signal.SIGKILL)
  except OSError:
    pass
"""

_PROCESSES = flags.DEFINE_integer('processes', None, 'How many processes to start.')
_DEVICES = flags.DEFINE_integer('devices_per_process', 0,
                                'CPU devices per process (0: leave XLA_FLAGS as it is).')
_GRACE = flags.DEFINE_float('grace_s', 3.0, 'Seconds from SIGTERM to SIGKILL for the '
                            'processes left when one has failed.')
_STOP_GRACE = flags.DEFINE_float('stop_grace_s', 120.0, 'Seconds from a stop signal passed on '
                                 'to SIGKILL for the processes still running.')


def free_port():
  """A port of localhost nobody listens on (bound once, released)."""
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def process_env(base, index, count, address, devices=0):
  """The environment of process `index`: the run's coordinates (none for a
  single process, which needs no coordinator), and CPU devices."""
  env = dict(base)
  for name in (ENV_ADDRESS, ENV_COUNT, ENV_INDEX):
    env.pop(name, None)
  if count > 1:
    env.update({ENV_ADDRESS: address, ENV_COUNT: str(count), ENV_INDEX: str(index)})
  if devices:
    xla = re.sub(rf'{_DEVICES_FLAG}=\S*', '', env.get('XLA_FLAGS', '')).split()
    env['XLA_FLAGS'] = ' '.join(xla + [f'{_DEVICES_FLAG}={devices}'])
  return env


def _pump(index, stream, out, lock):
  for line in iter(stream.readline, b''):
    with lock:
      out.write(f'[{index}] '.encode() + line)
      out.flush()
  stream.close()


def _status(code):
  return 128 - code if code < 0 else code


def _describe(code):
  if code < 0:
    try:
      return f'was killed by {signal.Signals(-code).name}'
    except ValueError:
      return f'was killed by signal {-code}'
  return f'exited with status {code}'


def _signal_groups(procs, signum, running_only=True):
  """`signum` to the process group of each of `procs` (its own and what it
  started); `running_only`: of those whose leader has not exited."""
  for p in procs:
    if not running_only or p.poll() is None:
      try:
        os.killpg(p.pid, signum)
      except ProcessLookupError:
        pass


def _stop(procs, pumps):
  """SIGKILL to whatever is left of every group (a process past its grace,
  what one started and left behind), then the output pumps, whose pipes
  close once no process holds them (bounded all the same)."""
  _signal_groups(procs, signal.SIGKILL, running_only=False)
  for p in procs:
    p.wait()
  for t in pumps:
    t.join(timeout=1)


def _check(processes, devices_per_process, grace_s, stop_grace_s, command):
  if not 1 <= processes <= MAX_PROCESSES:
    raise ConfigError(f'--processes={processes} must be between 1 and {MAX_PROCESSES} '
                      '(moe_jax.multiprocess.MAX_PROCESSES)')
  if devices_per_process < 0:
    raise ConfigError(f'--devices_per_process={devices_per_process} must be >= 0')
  for flag, value in (('--grace_s', grace_s), ('--stop_grace_s', stop_grace_s)):
    if not (math.isfinite(value) and value >= 0):
      raise ConfigError(f'{flag}={value} must be a finite number >= 0')
  if not command:
    raise ConfigError('no command: put it after --, e.g. -- python -m moe_jax.main ...')


def run(command, processes, devices_per_process=0, grace_s=3.0, out=None, err=None,
        poll_s=0.05, stop_grace_s=120.0):
  """Runs `command` as `processes` processes of one run; returns the exit status
  (0 when all exit 0, else the first failure's, after stopping the rest)."""
  _check(processes, devices_per_process, grace_s, stop_grace_s, command)
  out, err = out or sys.stdout.buffer, err or sys.stderr
  address, lock = f'localhost:{free_port()}', threading.Lock()
  procs, pumps, signalled = [], [], []
  guardian = subprocess.Popen([sys.executable, '-c', _GUARDIAN], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True)

  def on_signal(signum, _):
    # The first: SIGTERM, once (the trainer saves on it); a second: SIGKILL.
    signalled.append((signum, time.monotonic()))
    _signal_groups(procs, signal.SIGTERM if len(signalled) == 1 else signal.SIGKILL)

  previous = {s: signal.signal(s, on_signal) for s in _STOP_SIGNALS}
  try:
    for i in range(processes):
      if signalled:   # a stop during the start loop: start no more
        break
      # Its own session and group: a terminal's Ctrl-C reaches the launcher,
      # which passes it on once, and a signal to the group reaches what it started.
      p = subprocess.Popen(command, env=process_env(os.environ, i, processes, address,
                                                    devices_per_process),
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True,
                           preexec_fn=lifeline.preexec())
      procs.append(p)
      guardian.stdin.write(f'{p.pid}\n')
      guardian.stdin.flush()
      pumps.append(threading.Thread(target=_pump, args=(i, p.stdout, out, lock), daemon=True))
      pumps[-1].start()
    while True:   # one poll of each process per round: failure and "all done" agree
      codes = [p.poll() for p in procs]
      failed = next((i for i, code in enumerate(codes) if code), None)
      if failed is not None or None not in codes:
        break
      if signalled and time.monotonic() > signalled[0][1] + stop_grace_s:
        _stop(procs, pumps)
        err.write(f'error: {sum(c is None for c in codes)} of {len(procs)} processes still '
                  f'ran {stop_grace_s:g} s after the stop signal was passed on; killed them '
                  '(--stop_grace_s)\n')
        err.flush()
        return _status(-signal.SIGKILL)
      time.sleep(poll_s)
    if failed is None:
      return 0
    t_failed = time.monotonic()
    _signal_groups(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
      time.sleep(poll_s)
    _stop(procs, pumps)
    code = procs[failed].returncode
    err.write(f'error: process {failed} of {processes} {_describe(code)}; stopped the '
              f'others in {time.monotonic() - t_failed:.1f} s\n')
    err.flush()
    return _status(code)
  finally:
    _stop(procs, pumps)
    guardian.stdin.write('done\n')
    guardian.stdin.close()
    guardian.wait()
    for s, handler in previous.items():
      signal.signal(s, handler)


def main(argv):
  if '--' not in argv:
    raise ConfigError('no command: put it after --, e.g. -- python -m moe_jax.main ...')
  split = argv.index('--')
  ours, command = argv[:split], argv[split + 1:]
  try:
    rest = flags.FLAGS(ours)
  except flags.Error as e:
    raise ConfigError(str(e).splitlines()[0]) from None
  if len(rest) > 1:
    raise ConfigError(f'unexpected arguments before --: {" ".join(rest[1:])}')
  if _PROCESSES.value is None:
    raise ConfigError('--processes is required')
  return run(command, _PROCESSES.value, _DEVICES.value, _GRACE.value,
             stop_grace_s=_STOP_GRACE.value)


if __name__ == '__main__':
  sys.stdout.flush()
  code = cli.run_reporting_errors(main, sys.argv)
  sys.exit(code)
