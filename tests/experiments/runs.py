"""Tiny sweeps for the launcher tests, a way to launch them as a user would,
and made-up finished sweeps for the reports."""
import json
import os
import subprocess
import sys

from experiments import runner, sweep

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A CPU-sized run: 4 steps of 8 x 16 tokens, checkpoints at 2 and 4.
TINY = '''
from configs import lm_moe
def get_config(arg=None):
  config = lm_moe.get_config('tiny')
  config.update(total_steps=4, seq_len=16, batch_size=8, log_every_steps=2, eval_every_steps=4,
                eval_batches=1, checkpoint_every_steps=2)
  config.ckpt.async_save = False
  return config
'''


def sweep_file(directory, hyper_body):
  path = os.path.join(directory, 'sweep.py')
  with open(path, 'w') as f:
    f.write(TINY + 'def get_hyper(h):\n  return ' + hyper_body + '\n')
  return path


def env(cache_dir, **extra):
  """One CPU device (the runs are what is tested, not sharding), the other
  XLA flags of the session (tests/conftest.py's fast compiles, a caller's
  --xla_cpu_max_isa=AVX2), and a JAX
  compilation cache: runs of one shape compile once. A size limit turns on the
  cache's file lock, so runs in parallel never read a half-written entry."""
  out = dict(os.environ, PYTHONPATH=REPO, JAX_COMPILATION_CACHE_DIR=str(cache_dir),
             JAX_COMPILATION_CACHE_MAX_SIZE=str(2**30),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0', **extra)
  flags = [f for f in out.get('XLA_FLAGS', '').split()
           if not f.startswith('--xla_force_host_platform_device_count')]
  out['XLA_FLAGS'] = ' '.join(flags)
  return out


def start(module, *args, cache_dir, **extra_env):
  return subprocess.Popen([sys.executable, '-m', module, *args], cwd=REPO,
                          env=env(cache_dir, **extra_env), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def run(module, *args, cache_dir, **extra_env):
  """(exit status, stdout, stderr) of `python -m module args`."""
  proc = start(module, *args, cache_dir=cache_dir, **extra_env)
  out, err = proc.communicate(timeout=600)
  return proc.returncode, out, err


def made_up_sweep(root, spec, rows, config):
  """The sweep the launcher plans for `spec` (a config path in the
  repository, with its argument), written where and as the launcher writes
  it, each run finished with the metrics rows `rows(run)` and the config
  `config(run)`: a report's input without training. Returns the planned runs."""
  spec, planned = sweep.plan(os.path.join(REPO, spec))
  sweep.write(root, spec, planned)
  for r in planned:
    run_dir = os.path.join(root, r.name)
    with open(os.path.join(run_dir, 'config.json'), 'w') as f:
      json.dump(config(r), f)
    with open(os.path.join(run_dir, 'metrics.jsonl'), 'w') as f:
      f.writelines(json.dumps(row) + '\n' for row in rows(r))
    with open(os.path.join(run_dir, runner.STATUS_FILE), 'w') as f:
      json.dump(dict(state='done', attempts=1, wall_s=1.0), f)
  return planned


def assert_rebuilds(rebuilt, text):
  """A report's `rebuild` from its results file alone is part of the printed
  `text` and holds every table row printed (an empty rebuild is part of any
  text)."""
  rows = lambda t: [line for line in t.splitlines() if line.startswith('|')]
  assert rows(text), text[:2000]
  assert rebuilt in text and rows(rebuilt) == rows(text), rebuilt[:2000]
