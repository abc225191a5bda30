"""collect: runs-table rows from synthetic moe_jax workdirs."""
import json
import os

import pytest

from configs import common
from moe_jax.errors import ConfigError
from moe_jax.models import accounting, config as model_config
from moe_jax.scaling_laws import collect


def make_workdir(root, name, val_losses, **overrides):
  """A workdir with config.json (common.base() + overrides) and metrics.jsonl."""
  config = common.base()
  for key, value in overrides.items():
    group, _, leaf = key.rpartition('.')
    setattr(config[group] if group else config, leaf, value)
  workdir = os.path.join(root, name)
  os.makedirs(workdir)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(config.to_json())
  with open(os.path.join(workdir, 'metrics.jsonl'), 'w') as f:
    for step in range(10, config.total_steps + 1, 10):
      record = {'step': step, 'loss': 5.0}
      if step in val_losses:
        record['val_loss'] = val_losses[step]
      f.write(json.dumps(record) + '\n')
  return workdir


def test_dense_and_moe_rows(tmp_path):
  dense = collect.row(make_workdir(tmp_path, 'dense', {100: 4.0, 300: 3.5}))
  moe = collect.row(make_workdir(tmp_path, 'moe', {300: 3.2}, **{'moe.num_experts': 8}))
  tokens = 300 * 16 * 128
  assert (dense['kind'], dense['D1'], dense['D2'], dense['loss']) == ('dense', tokens, 0.0, 3.5)
  assert dense['N1'] == dense['N2'] == dense['N_total'] and dense['P'] == 1.0
  assert (moe['kind'], moe['D1'], moe['n_expert'], moe['top_k']) == ('moe', tokens, 8, 2)
  # N1 of a MoE is its dense counterpart; seed 002 eqs. 4-6 differ by the experts.
  cfg = model_config.ModelConfig.from_config(common.base(), vocab_size=1)
  expert, router = 3 * cfg.d_model * cfg.d_ff, cfg.d_model * 8
  assert moe['N1'] == dense['N1'] == accounting.counts(cfg).active_nonembed
  assert moe['N2'] - moe['N1'] == cfg.num_layers * (1 * expert + router)        # top-2 vs 1 MLP
  assert moe['N_total'] - moe['N1'] == cfg.num_layers * (7 * expert + router)   # 8 experts
  assert moe['P'] == pytest.approx(moe['N_total'] / moe['N2'])


def test_in_run_upcycle_splits_tokens_at_tau_and_counts_the_grown_model(tmp_path):
  row = collect.row(make_workdir(tmp_path, 'up', {300: 3.0}, **{
      'moe.num_experts': 4, 'upcycle.step': 100, 'upcycle.recipe': 'expand_experts'}))
  assert (row['kind'], row['D1'], row['D2']) == ('upcycled', 100 * 16 * 128, 200 * 16 * 128)
  fixed_8 = collect.row(make_workdir(tmp_path, 'moe8', {300: 3.0}, **{'moe.num_experts': 8}))
  assert (row['n_expert'], row['N_total'], row['N2']) == (8, fixed_8['N_total'], fixed_8['N2'])


def test_dense_to_moe_in_run_counts_the_target_experts(tmp_path):
  workdir = make_workdir(tmp_path, 'd2m', {300: 3.0}, **{
      'upcycle.step': 100, 'upcycle.recipe': 'dense_to_moe'})
  with open(os.path.join(workdir, 'config.json')) as f:
    config = json.load(f)
  config['upcycle']['target'] = {'moe': {'num_experts': 4}}
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    json.dump(config, f)
  row = collect.row(workdir)
  dense = collect.row(make_workdir(tmp_path, 'dense', {300: 3.0}))
  assert (row['n_expert'], row['N1']) == (4, dense['N1']) and row['P'] > 1


def test_upcycle_cli_source_counts_as_init_from(tmp_path):
  src = make_workdir(tmp_path, 'src', {200: 3.9}, total_steps=200)
  os.makedirs(os.path.join(src, 'checkpoints', '200'))
  row = collect.row(make_workdir(tmp_path, 'grown', {300: 3.1}, **{
      'moe.num_experts': 8, 'upcycle.source': os.path.join(src, 'checkpoints', '200')}))
  assert (row['kind'], row['D1'], row['D2']) == ('upcycled', 200 * 16 * 128, 300 * 16 * 128)


def test_init_from_takes_d1_and_n1_from_the_source(tmp_path):
  src = make_workdir(tmp_path, 'src', {200: 3.9}, total_steps=200, seq_len=64,
                     **{'model.d_model': 32, 'model.head_dim': 8})
  step_dir = os.path.join(src, 'checkpoints', '150')
  os.makedirs(step_dir)
  n1_src = collect.row(src)['N1']
  from_step = collect.row(make_workdir(tmp_path, 'a', {300: 3.1}, init_from=step_dir,
                                       **{'moe.num_experts': 8}))
  from_workdir = collect.row(make_workdir(tmp_path, 'b', {300: 3.1}, init_from=src,
                                          **{'moe.num_experts': 8}))
  assert from_step['kind'] == from_workdir['kind'] == 'upcycled'
  assert from_step['D1'] == 150 * 16 * 64 and from_workdir['D1'] == 200 * 16 * 64
  assert from_step['D2'] == 300 * 16 * 128
  assert from_step['N1'] == n1_src != collect.row(make_workdir(tmp_path, 'c', {300: 3.0}))['N1']


@pytest.mark.parametrize('case,match', [
    ('no_val_loss', 'no record has val_loss'),
    ('unfinished', 'last val_loss is at step 200, not total_steps=300'),
    ('missing_source', 'init_from=/nonexistent/ckpt: no such path'),
    ('no_metrics', 'no metrics.jsonl'),
])
def test_bad_workdirs_are_one_line_errors(tmp_path, case, match):
  kwargs = {'init_from': '/nonexistent/ckpt'} if case == 'missing_source' else {}
  val = {'no_val_loss': {}, 'unfinished': {200: 3.0}}.get(case, {300: 3.0})
  workdir = make_workdir(tmp_path, case, val, **kwargs)
  if case == 'no_metrics':
    os.remove(os.path.join(workdir, 'metrics.jsonl'))
  with pytest.raises(ConfigError, match=match) as e:
    collect.row(workdir)
  assert '\n' not in str(e.value)
