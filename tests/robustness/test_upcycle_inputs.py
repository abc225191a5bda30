"""`python -m moe_jax.upcycle` over bad inputs: paths that overlap --src
(directly or through symbolic links), damaged sources, bad recipes. Each
exits 2 (1: a non-finite preservation report) with one `error:` line, writes
nothing into --src and creates no --dst."""
import os

import pytest

from tests.robustness import damage, harness, rows
from tests.robustness.rows import param

UP = '--config={configs}/upcycle/expand_experts.py'


def _copy(fn, *args):
  return lambda p: fn(p['copy'], *args)


def _link(name, target):
  return lambda p: os.symlink(target.format(**p), os.path.join(p['tmp'], name))


def _tmp_file(relpath, data='x'):
  return lambda p: damage.write(p['tmp'], relpath, data)


def _config_json(*keys_value):
  *keys, value = keys_value

  def edit(record):
    for key in keys[:-1]:
      record = record[key]
    record[keys[-1]] = value
  return lambda p: damage.edit_json(p['copy'], 'config.json', edit)


ROWS = [
    param('stray_positional', f'{UP} --src={{wd}} --dst={{tmp}}/x extra', r'unexpected argument'),
    param('missing_dst_flag', f'{UP} --src={{wd}}', r'--dst'),
    param('config_missing', '--config={tmp}/c.py --src={wd} --dst={tmp}/x', r'c.py: no such file'),
    param('config_override_unknown', f'{UP} --config.bogus=1 --src={{wd}} --dst={{tmp}}/x',
          r"config has no key 'bogus'"),
    param('factor_one', f'{UP}:factor=1 --src={{wd}} --dst={{tmp}}/x',
          r'upcycle.factor=1 must be an integer >= 2'),
    param('dense_recipe_on_moe_source', '--config={configs}/upcycle/dense_to_moe.py:experts=4 '
          '--src={wd} --dst={tmp}/x', r'dense'),
    param('config_argument_unknown', f'{UP}:bogus=1 --src={{wd}} --dst={{tmp}}/x',
          r"config argument 'bogus' is not one of"),
    param('config_argument_not_a_number', f'{UP}:factor=abc --src={{wd}} --dst={{tmp}}/x',
          r"invalid literal for int\(\) with base 10: 'abc'"),
    param('metric_unknown', f'{UP}:allocation=utility,metric=bogus --src={{wd}} --dst={{tmp}}/x',
          r"upcycle.args.utility_metric='bogus' is not one of"),
    param('seed_negative', f'{UP} --config.seed=-1 --src={{wd}} --dst={{tmp}}/x',
          r'upcycle.seed=-1 must be a non-negative integer'),
    param('delta_nan', f'{UP}:delta=nan --src={{wd}} --dst={{tmp}}/x',
          r'upcycle.args.delta=nan must be a finite number'),
    param('depth_method_unknown', '--config={configs}/upcycle/grow_depth.py:method=bogus '
          '--src={wd} --dst={tmp}/x', r"upcycle.args.method='bogus' is not one of"),
    param('target_key_unknown', f'{UP} --config.target.moe.top_k=9 --src={{wd}} --dst={{tmp}}/x',
          r"config has no key 'moe'"),
    # --dst against --src: directly, and through symbolic links both ways.
    param('dst_inside_src', f'{UP} --src={{copy}} --dst={{copy}}/x', r'must lie outside --src'),
    param('dst_is_src', f'{UP} --src={{copy}} --dst={{copy}} --overwrite', r'must lie outside'),
    param('dst_contains_src', f'{UP} --src={{copy}} --dst={{tmp}} --overwrite',
          r'must lie outside --src'),
    param('dst_under_a_link_to_src', f'{UP} --src={{copy}} --dst={{tmp}}/link/x',
          r'--dst=.*/link/x \(.*/copy/x\) must lie outside --src', _link('link', '{copy}')),
    param('dst_is_a_link_into_src', f'{UP} --src={{copy}} --dst={{tmp}}/link --overwrite',
          r'must lie outside --src', _link('link', '{copy}/checkpoints')),
    param('src_is_a_link', f'{UP} --src={{tmp}}/link --dst={{copy}}/x',
          r'must lie outside --src \(workdir .*/copy\)', _link('link', '{copy}')),
    param('src_is_a_link_to_a_step', f'{UP} --src={{tmp}}/link --dst={{copy}}/x',
          r'must lie outside --src', _link('link', '{copy}/checkpoints/2')),
    # --dst itself.
    param('dst_exists', f'{UP} --src={{wd}} --dst={{tmp}}/d',
          r'--dst=.*/d exists; pass --overwrite',
          _tmp_file('d/keep.txt')),
    param('dst_exists_as_a_file', f'{UP} --src={{wd}} --dst={{tmp}}/d', r'exists; pass --overwrite',
          _tmp_file('d')),
    param('dst_dangling_link', f'{UP} --src={{wd}} --dst={{tmp}}/d', r'exists; pass --overwrite',
          _link('d', '{tmp}/nowhere')),
    param('dst_parent_missing', f'{UP} --src={{wd}} --dst={{tmp}}/no/x',
          r'the parent directory of --dst=.*/no/x does not exist'),
    param('dst_parent_is_a_file', f'{UP} --src={{wd}} --dst={{tmp}}/f/x',
          r'the parent directory of --dst=.*/f/x is not a directory', _tmp_file('f')),
    param('dst_empty', f'{UP} --src={{wd}} --dst=', r'--dst is empty'),
    # --src.
    param('src_missing', f'{UP} --src={{tmp}}/none --dst={{tmp}}/x', r'/none does not exist'),
    param('src_is_a_file', f'{UP} --src={{tmp}}/f --dst={{tmp}}/x', r'/f is not a directory',
          _tmp_file('f')),
    param('src_with_an_empty_step_dir', f'{UP} --src={{tmp}}/s --dst={{tmp}}/x',
          r'/s holds no checkpoint: its step directories \(3\) hold no params',
          _tmp_file('s/3/.keep', '')),
    param('src_without_checkpoints', f'{UP} --src={{tmp}}/s --dst={{tmp}}/x',
          r'no checkpoint in .*/s/checkpoints', _tmp_file('s/checkpoints/.keep', '')),
    param('src_without_config_json', f'{UP} --src={{copy}} --dst={{tmp}}/x',
          r'copy/config.json is missing \(--src must be a workdir',
          _copy(damage.remove, 'config.json')),
    param('src_config_json_malformed', f'{UP} --src={{copy}} --dst={{tmp}}/x',
          r'config.json: not JSON', _copy(damage.write, 'config.json', '{')),
    param('src_bpe_without_tokenizer', f'{UP} --src={{copy}} --dst={{tmp}}/x',
          r'tokenizer.json is missing', _config_json('data', 'tokenizer', 'bpe')),
    # delta=0 from here on: the trained source has no router bias to perturb, and
    # that is refused before its params are read.
    param('src_zeros_in_params', f'{UP}:delta=0 --src={{copy}} --dst={{tmp}}/x',
          r'checkpoint .*copy/checkpoints/2', _copy(damage.zeros_in_params, 2)),
    param('src_params_of_another_step', f'{UP}:delta=0 --src={{copy}} --dst={{tmp}}/x',
          r'checkpoints/2: params.* does not match its digest',
          _copy(damage.params_of_another_step, 2, 1)),
    param('src_nan_params', f'{UP}:delta=0 --src={{copy}} --dst={{tmp}}/x',
          r"checkpoints/3: params\['lm_head'\] holds non-finite values",
          _copy(damage.lm_head_filled, 2, 3, float('nan'))),
    param('src_loss_overflows', f'{UP}:delta=0 --src={{copy}} --dst={{tmp}}/x',
          r'checkpoints/3: the function-preservation report is not finite \(loss_before=nan',
          _copy(damage.lm_head_filled, 2, 3, 1e38), rc=1),
]


@pytest.mark.parametrize('row', ROWS)
def test_upcycle_refuses_bad_input(cli, trained, tmp_path, row):
  rows.check(cli, 'moe_jax.upcycle', row, tmp_path, trained)


def test_upcycle_refuses_a_read_only_dst_parent(cli, trained, tmp_path, read_only_dir):
  before = harness.tree_digest(tmp_path, trained)
  result = cli.run('moe_jax.upcycle', UP.format(configs=harness.CONFIGS), f'--src={trained}',
                   f'--dst={read_only_dir}/x', cwd=tmp_path)
  harness.assert_one_error_line(result, 2, r'the parent directory of --dst=.*/ro/x is not writable')
  assert harness.tree_digest(tmp_path, trained) == before
