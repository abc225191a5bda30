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
prints one `error:` line naming the process and exits with that process's
status (128 + N for a signal N). SIGTERM or Ctrl-C to the launcher is passed
to every process once (the trainer saves a checkpoint and exits).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from absl import flags

from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.workdir.placement import ENV_ADDRESS, ENV_COUNT, ENV_INDEX

_DEVICES_FLAG = '--xla_force_host_platform_device_count'

_PROCESSES = flags.DEFINE_integer('processes', None, 'How many processes to start.')
_DEVICES = flags.DEFINE_integer('devices_per_process', 0,
                                'CPU devices per process (0: leave XLA_FLAGS as it is).')
_GRACE = flags.DEFINE_float('grace_s', 3.0, 'Seconds from SIGTERM to SIGKILL for the '
                            'processes left when one has failed.')


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


def run(command, processes, devices_per_process=0, grace_s=3.0, out=None, poll_s=0.05):
  """Runs `command` as `processes` processes of one run; returns the exit status
  (0 when all exit 0, else the first failure's, after stopping the rest)."""
  if processes < 1:
    raise ConfigError(f'--processes={processes} must be at least 1')
  if devices_per_process < 0:
    raise ConfigError(f'--devices_per_process={devices_per_process} must be >= 0')
  if not command:
    raise ConfigError('no command: put it after --, e.g. -- python -m moe_jax.main ...')
  out = out or sys.stdout.buffer
  address, lock = f'localhost:{free_port()}', threading.Lock()
  procs, pumps, signalled = [], [], []

  def on_signal(signum, _):
    if not signalled:   # once: the trainer saves on the first SIGTERM
      signalled.append(signum)
      for p in procs:
        if p.poll() is None:
          p.send_signal(signal.SIGTERM)

  previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    for i in range(processes):
      # Its own session: a terminal's Ctrl-C reaches the launcher, which passes it on once.
      p = subprocess.Popen(command, env=process_env(os.environ, i, processes, address,
                                                    devices_per_process),
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True)
      procs.append(p)
      pumps.append(threading.Thread(target=_pump, args=(i, p.stdout, out, lock), daemon=True))
      pumps[-1].start()
    while True:   # one poll of each process per round: failure and "all done" agree
      codes = [p.poll() for p in procs]
      failed = next((i for i, code in enumerate(codes) if code), None)
      if failed is not None or None not in codes:
        break
      time.sleep(poll_s)
    if failed is not None:
      t_failed = time.monotonic()
      for p in procs:
        if p.poll() is None:
          p.send_signal(signal.SIGTERM)
      deadline = time.monotonic() + grace_s
      while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(poll_s)
      for p in procs:
        if p.poll() is None:
          p.kill()
      for p in procs:
        p.wait()
      for t in pumps:
        t.join(timeout=5)
      code = procs[failed].returncode
      with lock:
        out.write((f'error: process {failed} of {processes} {_describe(code)}; stopped the '
                   f'others in {time.monotonic() - t_failed:.1f} s\n').encode())
        out.flush()
      return _status(code)
    for t in pumps:
      t.join(timeout=5)
    return 0
  finally:
    for p in procs:   # only on an error of our own: leave nothing behind
      if p.poll() is None:
        p.kill()
        p.wait()
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
  return run(command, _PROCESSES.value, _DEVICES.value, _GRACE.value)


if __name__ == '__main__':
  sys.stdout.flush()
  code = cli.run_reporting_errors(main, sys.argv)
  sys.exit(code)
