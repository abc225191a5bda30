"""`python -m moe_jax.evaluate` over bad inputs and damaged checkpoints: each
exits 2 (1: a non-finite loss) with one `error:` line naming the path, step
or key, and writes nothing; evaluating is read-only when it succeeds too."""
import json

import pytest

from tests.robustness import damage, harness, rows
from tests.robustness.rows import param


def _copy(fn, *args):
  return lambda p: fn(p['copy'], *args)


def _config_json(*keys_value):
  *keys, value = keys_value

  def edit(record):
    for key in keys[:-1]:
      record = record[key]
    record[keys[-1]] = value
  return lambda p: damage.edit_json(p['copy'], 'config.json', edit)


def _mkdir(relpath):
  return lambda p: damage.write(p['tmp'], f'{relpath}/.keep', '')


ROWS = [
    param('stray_positional', '--ckpt={wd} extra', r'unexpected argument: extra'),
    param('missing_ckpt_flag', '--batches=1', r'--ckpt'),
    param('batches_negative', '--ckpt={wd} --batches=-1', r'--batches=-1 must be >= 0'),
    param('batches_not_a_number', '--ckpt={wd} --batches=abc', r'--batches'),
    param('ckpt_missing', '--ckpt={tmp}/none', r'checkpoint path .*/none does not exist'),
    param('ckpt_is_a_file', '--ckpt={tmp}/f', r'checkpoint path .*/f is not a directory',
          lambda p: damage.write(p['tmp'], 'f', 'x')),
    param('ckpt_plain_directory', '--ckpt={tmp}', r'is neither a workdir, a checkpoints directory'),
    param('ckpt_with_an_empty_step_dir', '--ckpt={tmp}/x',
          r'.*/x holds no checkpoint: its step directories \(5\) hold no params', _mkdir('x/5')),
    param('ckpt_empty_step_dir', '--ckpt={tmp}/x/5', r'.*/x/5 is not a checkpoint step',
          _mkdir('x/5')),
    param('ckpt_step_missing', '--ckpt={wd}/checkpoints/7', r'checkpoints/7 does not exist'),
    param('config_flag_missing_file', '--ckpt={wd} --config={tmp}/c.py', r'c.py: no such file'),
    param('config_override_unknown', '--ckpt={wd} --config={cfg} --config.bogus=1',
          r"config has no key 'bogus'"),
    param('config_json_missing', '--ckpt={copy}', r'config.json is missing: pass --config',
          _copy(damage.remove, 'config.json')),
    param('config_json_malformed', '--ckpt={copy}', r'config.json: not JSON',
          _copy(damage.write, 'config.json', '{"model"')),
    param('config_json_empty', '--ckpt={copy}', r'config.json: not JSON',
          _copy(damage.write, 'config.json', '')),
    param('config_json_a_list', '--ckpt={copy}', r'config.json: expected a JSON object',
          _copy(damage.write, 'config.json', '[1]')),
    param('bpe_without_tokenizer_json', '--ckpt={copy}',
          r'copy/tokenizer.json is missing: data.tokenizer=bpe needs the tokenizer',
          _config_json('data', 'tokenizer', 'bpe')),
    param('vocab_below_tokenizer', '--ckpt={copy}', r'model.vocab_size=10 is smaller',
          _config_json('model', 'vocab_size', 10)),
    param('no_eval_batches', '--ckpt={copy}', r'eval_batches=0: no validation batches',
          _config_json('eval_batches', 0)),
    # Damaged checkpoints: the error names the step.
    param('zeros_in_params_data', '--ckpt={copy}', r'checkpoint .*copy/checkpoints/2',
          _copy(damage.zeros_in_params, 2)),
    param('zeros_in_params_data_of_a_step', '--ckpt={copy}/checkpoints/1',
          r'checkpoint .*copy/checkpoints/1', _copy(damage.zeros_in_params, 1)),
    param('truncated_params_data', '--ckpt={copy}', r'checkpoint .*checkpoints/2 cannot be read',
          _copy(damage.truncate_params, 2)),
    param('params_of_another_step', '--ckpt={copy}',
          r"checkpoints/2: params\['.*'\].* does not match its digest",
          _copy(damage.params_of_another_step, 2, 1)),
    param('params_deleted', '--ckpt={copy}', r'checkpoints/2 is incomplete: no params',
          _copy(damage.remove, 'checkpoints/2/params')),
    param('meta_deleted', '--ckpt={copy}', r'checkpoints/2 is incomplete: no meta',
          _copy(damage.remove, 'checkpoints/2/meta')),
    param('meta_garbled', '--ckpt={copy}', r'checkpoints/2 cannot be read',
          _copy(damage.write, 'checkpoints/2/meta/metadata', '{"step": 2, "dig')),
    param('params_metadata_deleted', '--ckpt={copy}',
          r'checkpoints/2: the params metadata is missing',
          _copy(damage.remove, 'checkpoints/2/params/_METADATA')),
    param('nan_params', '--ckpt={copy}', r"checkpoints/3: params\['lm_head'\] holds non-finite",
          _copy(damage.lm_head_filled, 2, 3, float('nan'))),
    param('loss_overflows', '--ckpt={copy}', r'checkpoints/3: val_loss is nan',
          _copy(damage.lm_head_filled, 2, 3, 1e38), rc=1),
]


@pytest.mark.parametrize('row', ROWS)
def test_evaluate_refuses_bad_input(cli, trained, tmp_path, row):
  rows.check(cli, 'moe_jax.evaluate', row, tmp_path, trained)


def test_evaluate_writes_nothing(cli, trained, tmp_path):
  before = harness.tree_digest(trained)
  result = cli.run('moe_jax.evaluate', f'--ckpt={trained}', '--batches=1', cwd=tmp_path)
  assert result.rc == 0, result.stderr
  assert json.loads(result.stdout)['step'] == 2
  assert harness.tree_digest(trained) == before
