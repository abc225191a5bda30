"""`python -m moe_jax.main --workdir=DIR` without --config: a workdir goes on
from its own config.json, with --config.KEY=VALUE for keys that keep the
parameter shapes. The issue's case: a :tiny dense run sparse-upcycled by
configs/upcycle/dense_to_moe.py, trained on both without restating a config
and restating configs/lm_moe.py:tiny (the recipe's defaults match it)."""
import os
import subprocess
import sys

import pytest

from configs import common, lm_dense, lm_moe
from configs.upcycle import dense_to_moe
from moe_jax.errors import ConfigError
from moe_jax.train import trainer
from moe_jax.upcycle import run as upcycle_run
from moe_jax.workdir import files, saved_config

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_RUN = dict(total_steps=2, batch_size=8, seq_len=16, log_every_steps=1, eval_every_steps=2,
            eval_batches=1, checkpoint_every_steps=2)


def _config(get_config, **overrides):
  config = get_config('tiny')
  config.update(dict(_RUN, **overrides))
  config.ckpt.async_save = False
  return config


def _main(*args):
  env = dict(os.environ, PYTHONPATH=_REPO)
  return subprocess.run([sys.executable, '-m', 'moe_jax.main', *args], cwd=_REPO, env=env,
                        capture_output=True, text=True, check=False)


def _saved(tmp_path, **groups):
  """A workdir whose config.json is the base config with `groups` updated
  (a run's config.json holds every key: moe_jax/json_file.py refuses less)."""
  config = common.base().to_dict()
  for key, value in groups.items():
    config[key] = dict(config[key], **value) if isinstance(value, dict) else value
  workdir = tmp_path / 'w'
  workdir.mkdir()
  files.write_json(str(workdir / files.CONFIG), config)
  return str(workdir)


def test_an_upcycled_workdir_trains_on_without_a_config_and_with_lm_moe_restated(tmp_path):
  dense, moe = str(tmp_path / 'dense'), str(tmp_path / 'moe')
  trainer.train_and_evaluate(_config(lm_dense.get_config), dense)
  upcycle_run.upcycle_checkpoint(dense_to_moe.get_config(), dense, moe)
  before = files.read_json(os.path.join(moe, files.CONFIG))

  proc = _main(f'--workdir={moe}', '--config.total_steps=2', '--config.eval_every_steps=1')
  assert proc.returncode == 0, proc.stderr
  assert sorted(os.listdir(os.path.join(moe, 'checkpoints'))) == ['0', '2']
  val_steps = [r['step'] for r in files.metrics(moe) if 'val_loss' in r]
  assert val_steps == [1, 2]   # the override took effect
  after = files.read_json(os.path.join(moe, files.CONFIG))
  assert after['moe'] == before['moe'] and after['eval_every_steps'] == 1

  # Restating the config a user would name for this model works as well.
  last = trainer.train_and_evaluate(_config(lm_moe.get_config, total_steps=3), moe)
  assert last['loss'] > 0 and '3' in os.listdir(os.path.join(moe, 'checkpoints'))


def test_a_shape_key_is_refused_naming_it(tmp_path):
  workdir = _saved(tmp_path, total_steps=4, moe=dict(num_experts=8, use_bias=True))
  with pytest.raises(ConfigError, match=r'^--config.moe.num_experts=4: moe.num_experts changes '
                     r'the parameter shapes .* \(moe.num_experts=8\)'):
    saved_config.load(workdir, ['--config.moe.num_experts=4'])
  # The saved value restated is no change.
  assert saved_config.load(workdir, ['--config.moe.num_experts=8']).moe.num_experts == 8


@pytest.mark.parametrize('override, message', [
    ('--config.total_step=9', r"config has no key 'total_step' .*did you mean 'total_steps'\?"),
    ('--config.total_steps=x', r"total_steps must be an integer, not 'x'"),
    ('--config.moe.use_bias=maybe', r'moe.use_bias must be true or false'),
])
def test_bad_overrides_are_one_line(tmp_path, override, message):
  workdir = _saved(tmp_path, total_steps=4, moe=dict(num_experts=8, use_bias=True))
  with pytest.raises(ConfigError, match=message):
    saved_config.load(workdir, [override])


def test_overrides_take_the_saved_types(tmp_path):
  workdir = _saved(tmp_path, total_steps=4, opt=dict(lr=1e-3), moe=dict(use_bias=False),
                   data=dict(patterns=''), phases=dict(fractions=[]))
  config = saved_config.load(workdir, [
      '--config.total_steps=10', '--config.opt.lr=3e-4', '--config.moe.use_bias=false',
      '--config.data.patterns=a/*.txt', '--config.phases.fractions=[0.5,0.5]'])
  assert config.total_steps == 10 and config.opt.lr == 3e-4 and config.moe.use_bias is False
  assert config.data.patterns == 'a/*.txt' and list(config.phases.fractions) == [0.5, 0.5]


def test_a_workdir_without_config_json_is_one_line_and_written_nothing(tmp_path):
  proc = _main(f'--workdir={tmp_path}/new', '--config.total_steps=3')
  assert proc.returncode == 2 and proc.stdout == ''
  assert proc.stderr.strip().splitlines() == [
      f'error: --workdir={tmp_path}/new has no config.json to continue from; start a run with '
      '--config=configs/NAME.py (e.g. configs/lm_moe.py:tiny)']
  assert not os.path.exists(tmp_path / 'new')


def test_a_restated_config_of_another_shape_points_to_the_workdir_form(tmp_path):
  workdir = _saved(tmp_path, model=dict(d_model=64), moe=dict(num_experts=4))
  config = _config(lm_moe.get_config)
  with pytest.raises(ConfigError, match=r'moe.num_experts: workdir 4 vs requested 8.*continue it '
                     r'from its own config.json with python -m moe_jax.main --workdir='):
    files.check_compatible(config, workdir)


def test_help_says_where_the_config_keys_are_and_the_no_config_form():
  proc = _main('--help')
  text = ' '.join(proc.stdout.split())
  assert 'configs/common.py' in text and '--config.KEY=VALUE' in text
  assert 'python -m moe_jax.main --workdir=DIR [--config.KEY=VALUE ...]' in text
