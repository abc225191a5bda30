r"""Many processes on one machine against one process: docs/multihost.md's numbers.

  python -m experiments.bench.multihost --out=docs/multihost/results.json [--steps=20]

Trains the tiny MoE (configs/lm_moe.py:tiny) for --steps steps through
`python -m moe_jax.multiprocess` and compares workdirs:
  equal     2 processes x 2 CPU devices against 1 process x 4, the same global
            mesh (data=4), batch and seed: logged losses and the final state;
  expert    the same with mesh.expert=4 (the all-to-all crosses processes);
  kill      2 x 2 again, process 1 killed (SIGKILL) once process 0 has logged a
            random step: seconds until the launcher and process 0 are gone, then
            the run launched again resumes; its losses against `equal`'s 2 x 2;
            and the same kill without the launcher (JAX's own detection);
  reshard   `equal`'s 2 x 2 checkpoint of step steps/2 continued by 1 process x 4
            devices and by 4 processes x 1 device: losses against 2 x 2.
Timings are wall seconds on whatever this machine is doing at the time.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

from experiments import provenance
from moe_jax.workdir import checkpoint, files

CONFIG = 'configs/lm_moe.py:tiny'


def overrides(steps, **extra):
  keys = dict(total_steps=steps, batch_size=8, seq_len=64, log_every_steps=1,
              eval_every_steps=steps // 2, eval_batches=2, checkpoint_every_steps=steps // 4,
              **{'ckpt.keep': 0, 'opt.warmup_steps': 5}, **extra)
  return [f'--config.{k}={v}' for k, v in keys.items()]


def launch_argv(workdir, processes, devices, steps, **extra):
  return [sys.executable, '-m', 'moe_jax.multiprocess', f'--processes={processes}',
          f'--devices_per_process={devices}', '--', sys.executable, '-m', 'moe_jax.main',
          f'--config={CONFIG}', f'--workdir={workdir}', *overrides(steps, **extra)]


def train(workdir, processes, devices, steps, **extra):
  t0 = time.perf_counter()
  proc = subprocess.run(launch_argv(workdir, processes, devices, steps, **extra),
                        capture_output=True, text=True, check=False)
  if proc.returncode:
    raise RuntimeError(f'{workdir}: exit {proc.returncode}\n{proc.stdout[-3000:]}')
  return time.perf_counter() - t0


def losses(workdir):
  return {r['step']: r['loss'] for r in files.metrics(workdir)}


def state(workdir, step):
  """params and opt_state of a step as numpy on one device, whatever mesh wrote them."""
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  out = {}
  with ocp.StandardCheckpointer() as ckptr:
    for name in ('params', 'opt_state'):
      path = os.path.join(os.path.abspath(workdir), files.CHECKPOINTS, str(step), name)
      meta = ckptr.metadata(path)
      target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                            getattr(meta, 'item_metadata', meta))
      out[name] = jax.tree.map(np.asarray, ckptr.restore(path, target))
  return out


def compare(a, b, steps):
  """Largest loss and state differences of two workdirs, and whether bitwise."""
  la, lb = losses(a), losses(b)
  common = sorted(set(la) & set(lb))
  loss_diff = max(abs(la[s] - lb[s]) for s in common)
  sa, sb = state(a, steps), state(b, steps)
  diffs = jax.tree.leaves(jax.tree.map(lambda x, y: float(np.max(np.abs(x - y))) if x.size
                                       else 0.0, sa, sb))
  same = all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(sa), jax.tree.leaves(sb)))
  return dict(steps_compared=len(common), loss_max_abs_diff=loss_diff,
              state_max_abs_diff=max(diffs), state_bitwise=same,
              losses_bitwise=all(la[s] == lb[s] for s in common))


def _children(pid):
  with open(f'/proc/{pid}/task/{pid}/children') as f:
    return [int(c) for c in f.read().split()]


def kill_run(workdir, steps, rng):
  """2 x 2, process 1 SIGKILLed after process 0 logs a random step; the
  launcher's exit and process 0's end timed from the kill."""
  kill_at = int(rng.integers(steps // 4 + 1, steps - 1))
  launcher = subprocess.Popen(launch_argv(workdir, 2, 2, steps), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
  while kill_at not in losses(workdir):
    if launcher.poll() is not None:
      raise RuntimeError(f'{workdir}: ended before step {kill_at}\n{launcher.stdout.read()}')
    time.sleep(0.02)
  pids = _children(launcher.pid)   # process i is the i-th started
  logged = max(losses(workdir))
  t0 = time.perf_counter()
  os.kill(pids[1], signal.SIGKILL)
  p0_gone = None
  while launcher.poll() is None:
    if p0_gone is None and not os.path.exists(f'/proc/{pids[0]}'):
      p0_gone = time.perf_counter() - t0
    time.sleep(0.01)
  launcher_s = time.perf_counter() - t0
  out = launcher.stdout.read()
  kept = sorted(int(d) for d in os.listdir(os.path.join(workdir, files.CHECKPOINTS))
                if d.isdigit())
  return dict(killed_after_step=logged, process0_exit_s=p0_gone or launcher_s,
              launcher_exit_s=launcher_s, launcher_status=launcher.returncode,
              launcher_last_line=out.strip().splitlines()[-1], checkpoints_left=kept)


def kill_unwatched(workdir, steps, rng, limit_s=200.0):
  """The same kill without the launcher's watchdog: two processes started
  directly; seconds until process 0 ends by itself (JAX's own detection), and
  the last line it printed."""
  from moe_jax import multiprocess  # pylint: disable=g-import-not-at-top
  kill_at = int(rng.integers(steps // 4 + 1, steps - 1))
  address = f'localhost:{multiprocess.free_port()}'
  argv = launch_argv(workdir, 2, 2, steps)
  command = argv[argv.index('--') + 1:]
  procs = [subprocess.Popen(command, env=multiprocess.process_env(os.environ, i, 2, address, 2),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  try:
    while kill_at not in losses(workdir):
      if any(p.poll() is not None for p in procs):
        raise RuntimeError(f'{workdir}: ended before step {kill_at}')
      time.sleep(0.02)
    t0 = time.perf_counter()
    procs[1].kill()
    try:
      procs[0].wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
      procs[0].kill()
      procs[0].wait()
      return dict(killed_after_step=kill_at, process0_exit_s=None,
                  note=f'still running after {limit_s} s; killed')
    seconds = time.perf_counter() - t0
    lines = [l for l in procs[0].stdout.read().splitlines() if l.strip()]
    return dict(killed_after_step=kill_at, process0_exit_s=seconds,
                process0_status=procs[0].returncode,
                process0_error=next((l for l in reversed(lines) if 'rror' in l), lines[-1])[:300])
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument('--out', required=True)
  ap.add_argument('--steps', type=int, default=20)
  ap.add_argument('--seed', type=int, default=0, help='picks the step of the kill')
  args = ap.parse_args(argv)
  logging.set_verbosity(logging.ERROR)   # Orbax warns on every metadata read
  steps, rng = args.steps, np.random.default_rng(args.seed)
  root = tempfile.mkdtemp(prefix='multihost_')
  wd = lambda name: os.path.join(root, name)
  result = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
                jax=jax.__version__, config=CONFIG, overrides=overrides(steps),
                machine='2-core CPU shared with parallel work; CPU devices via '
                        '--xla_force_host_platform_device_count, gloo collectives')
  try:
    wall = {}
    for name, procs, devs, extra in (('p1x4', 1, 4, {}), ('p2x2', 2, 2, {}),
                                     ('p1x4_expert4', 1, 4, {'mesh.expert': 4, 'mesh.data': 1}),
                                     ('p2x2_expert4', 2, 2, {'mesh.expert': 4, 'mesh.data': 1})):
      wall[name] = train(wd(name), procs, devs, steps, **extra)
    result['wall_s'] = wall
    result['equal'] = compare(wd('p1x4'), wd('p2x2'), steps)
    result['expert'] = compare(wd('p1x4_expert4'), wd('p2x2_expert4'), steps)

    result['kill'] = kill_run(wd('killed'), steps, rng)
    train(wd('killed'), 2, 2, steps)   # launched again: resumes from the newest complete step
    result['kill']['resumed'] = compare(wd('p2x2'), wd('killed'), steps)
    result['kill_without_watchdog'] = kill_unwatched(wd('unwatched'), steps, rng)

    half, result['reshard'] = steps // 2, {}
    for name, procs, devs in (('to_p1x4', 1, 4), ('to_p4x1', 4, 1)):
      shutil.copytree(wd('p2x2'), wd(name))
      for d in os.listdir(os.path.join(wd(name), files.CHECKPOINTS)):
        if d.isdigit() and int(d) > half:
          shutil.rmtree(os.path.join(wd(name), files.CHECKPOINTS, d))
      train(wd(name), procs, devs, steps)
      result['reshard'][name] = dict(compare(wd('p2x2'), wd(name), steps), from_step=half)
  finally:
    shutil.rmtree(root, ignore_errors=True)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  files.write_json(args.out, dict(result, provenance=provenance.record()))
  print(json.dumps(result, indent=2))


if __name__ == '__main__':
  main()
