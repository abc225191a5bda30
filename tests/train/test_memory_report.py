"""The memory report (`python -m moe_jax.plan --memory`, moe_jax/train/memory.py):
its byte counts add up, the batch it says fits does, the memory paths lower
what they should, and bad input is a one-line error."""
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config
from moe_jax.models import transformer
from moe_jax.train import memory
from moe_jax.workdir import placement
from tests.train import tiny

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(**overrides):
  # Long rows, so activations, not params, fill the temporaries (as at scale).
  return tiny.config(**{'mesh.num_devices': 1, 'model.vocab_size': 512, 'model.num_layers': 4,
                        'seq_len': 256, **overrides})


def test_bytes_add_up_and_the_fitted_batch_fits():
  config = _config()
  out = memory.report(config, batch_per_device=4, device_memory=None)
  model = transformer.Transformer(model_config.from_config(config))
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(
      transformer.abstract_params(model, 8)))
  assert out['params'] == 4 * n_params
  assert 2 * out['params'] <= out['opt_state'] <= 2 * out['params'] + 1024   # mu, nu, counts
  assert out['temporaries'] > 0
  assert out['total'] >= out['params'] + out['opt_state'] + out['batch'] + out['temporaries']
  budget = out['total'] + 3 * (out['total'] - out['params'] - out['opt_state'])
  fit = memory.report(config, batch_per_device=4, device_memory=budget)
  b = fit['max_batch_per_device']
  assert b >= 4
  mesh = placement.make_mesh(config.mesh)
  assert memory.measure(config, mesh, b)['total'] <= budget


def test_memory_paths_lower_what_they_should():
  mesh = placement.make_mesh(_config().mesh)
  measure = lambda **kw: memory.measure(_config(**kw), mesh, 8)
  # Not remat: XLA:CPU's default scheduler undoes it, see docs/benchmarks.md "Memory".
  plain = measure()
  assert measure(**{'model.loss_chunk': 64})['temporaries'] < plain['temporaries']
  assert measure(grad_accum_steps=4)['temporaries'] < plain['temporaries']
  assert measure(**{'opt.mu_dtype': 'bfloat16'})['opt_state'] < plain['opt_state']


def test_device_memory_needs_a_unit():
  assert memory.parse_bytes('80GB') == 80 * 10**9
  assert memory.parse_bytes('24GiB') == 24 * 2**30
  for bad in ('80', '80 parsecs', 'GB', ''):
    with pytest.raises(ConfigError, match='--device_memory'):
      memory.parse_bytes(bad)


@pytest.mark.parametrize('flags, message', [
    (['--device_memory=80'], r'error: --device_memory=.80.: expected a number with a unit'),
    (['--config.model.remat=most'], r"error: model.remat='most' is not one of"),

])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, flags, message):
  env = dict(os.environ, PYTHONPATH=REPO)
  proc = subprocess.run(
      [sys.executable, '-m', 'moe_jax.plan', '--memory',
       f'--config={REPO}/configs/lm_moe.py:tiny', *flags],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr
  assert proc.stdout == ''
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and re.match(message, lines[0]), proc.stderr
  assert not os.listdir(tmp_path)
