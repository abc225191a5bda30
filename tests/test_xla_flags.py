"""XLA:CPU's scheduler flag for remat (moe_jax/xla_flags.py): set only where
it is needed and can still act, never over the user's XLA_FLAGS, and what the
run summary says about it."""
import json
import os
import subprocess
import sys

import pytest

from configs import common
from moe_jax import xla_flags
from moe_jax.train import summary
from moe_jax.workdir import files, placement, run_record

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHER = '--xla_force_host_platform_device_count=8'


@pytest.mark.parametrize('remat, environ, started, action, flags', [
    ('full', {'XLA_FLAGS': OTHER}, False, 'set', f'{OTHER} {xla_flags.FLAG}'),
    ('save_moe', {}, False, 'set', xla_flags.FLAG),
    ('none', {'XLA_FLAGS': OTHER}, False, '', OTHER),
    ('full', {'XLA_FLAGS': f'--{xla_flags.NAME}=true'}, False, 'user',
     f'--{xla_flags.NAME}=true'),
    ('full', {'XLA_FLAGS': OTHER, 'JAX_PLATFORMS': 'cuda'}, False, '', OTHER),
    ('full', {'XLA_FLAGS': OTHER}, True, 'late', OTHER),
])
def test_for_remat(monkeypatch, remat, environ, started, action, flags):
  monkeypatch.setattr(xla_flags, '_backends_started', lambda: started)
  assert xla_flags.for_remat(remat, environ) == action
  assert environ.get('XLA_FLAGS', '') == flags


def _memory_line(config, grad_accum_steps=None):
  mesh = placement.make_mesh(config.mesh)
  lines = summary.start_lines(config, run_record.build(config), mesh, '/tmp/run', 0,
                              grad_accum_steps)
  return [line for line in lines if line.startswith('memory ')]


def test_the_summary_says_whether_remat_can_free_memory(monkeypatch):
  config = common.base()
  config.model.vocab_size = 256
  assert _memory_line(config) == []   # the plain step: no line
  config.model.update(remat='full', loss_chunk=128, scan_layers=True)
  config.grad_accum_steps = 2
  monkeypatch.setenv('XLA_FLAGS', OTHER)
  (line,) = _memory_line(config)
  assert line.startswith('memory   remat full, grad_accum_steps 2, loss_chunk 128, scan_layers; ')
  assert 'remat frees no memory' in line and xla_flags.FLAG in line
  monkeypatch.setenv('XLA_FLAGS', f'{OTHER} {xla_flags.FLAG}')
  (line,) = _memory_line(config)
  assert line.endswith(f'; XLA_FLAGS {xla_flags.FLAG}')
  monkeypatch.setitem(xla_flags._done, 'action', 'set')
  (line,) = _memory_line(config)
  assert line.endswith('set by moe_jax.main: remat frees memory on XLA:CPU')


def test_plan_memory_compiles_under_the_flag(tmp_path):
  """A fresh process: the flag is in XLA_FLAGS before the backend starts, the
  user's other flags kept, and the report names it."""
  env = dict(os.environ, PYTHONPATH=REPO, XLA_FLAGS=OTHER)
  proc = subprocess.run(
      [sys.executable, '-m', 'moe_jax.plan', '--memory',
       f'--config={REPO}/configs/lm_dense.py:tiny', '--config.model.remat=full'],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr
  assert json.loads(proc.stdout)['xla_flags'] == f'{OTHER} {xla_flags.FLAG}'


def test_finetune_config_starts_no_backend(tmp_path):
  """configs/finetune.py is read while flags are parsed, before moe_jax.main
  can set XLA_FLAGS: finding the source's step must not start JAX."""
  workdir = tmp_path / 'src'
  os.makedirs(workdir / 'checkpoints' / '3' / 'params')
  os.makedirs(workdir / 'checkpoints' / '7' / 'params')
  config = common.base()
  config.model.vocab_size = 256
  files.write_config(str(workdir), config)
  code = ('from configs import finetune; from jax._src import xla_bridge; '
          f'c = finetune.get_config("ckpt={workdir}"); '
          'print(c.model.remat, c.init_from == ' + repr(str(workdir)) +
          ', xla_bridge.backends_are_initialized())')
  proc = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == ['full', 'True', 'False']


def test_accepted_asks_this_jaxlib():
  """A flag XLA has long had passes the probe; one it never had (which would
  abort the process that names it) does not."""
  assert xla_flags.accepted('--xla_backend_optimization_level=0')
  assert not xla_flags.accepted('--xla_cpu_no_such_flag=false')
