"""collect: runs-table rows from synthetic moe_jax workdirs (run.json as the
trainer writes it, and metrics.jsonl)."""
import json
import os

import ml_collections
import pytest

from configs import common
from moe_jax.errors import ConfigError
from moe_jax.models import accounting, config as model_config
from moe_jax.scaling_laws import collect
from moe_jax.upcycle import transition
from moe_jax.workdir import run_record


def make_workdir(root, name, val_losses, source=None, **overrides):
  """A workdir with run.json (common.base() + overrides, started from the
  checkpoint `source`) and metrics.jsonl."""
  config = common.base()
  config.model.vocab_size = 259
  for key, value in overrides.items():
    group, _, leaf = key.rpartition('.')
    setattr(config[group] if group else config, leaf, value)
  workdir = os.path.join(root, name)
  os.makedirs(workdir)
  grown = transition.target_config(config) if config.upcycle.step else None
  source = run_record.source_info(source) if source else None
  with open(os.path.join(workdir, 'run.json'), 'w') as f:
    json.dump(run_record.build(config, grown, source), f)
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
  cfg = model_config.from_config(common.base(), vocab_size=1)
  expert, router = 3 * cfg.d_model * cfg.d_ff, cfg.d_model * 8
  assert moe['N1'] == dense['N1'] == accounting.counts(cfg).active_nonembed
  assert moe['N2'] - moe['N1'] == cfg.num_layers * (1 * expert + router)        # top-2 vs 1 MLP
  assert moe['N_total'] - moe['N1'] == cfg.num_layers * (7 * expert + router)   # 8 experts
  assert moe['P'] == pytest.approx(moe['N_total'] / moe['N2'])


def test_in_run_upcycle_splits_tokens_at_tau_and_counts_the_grown_model(tmp_path):
  row = collect.row(make_workdir(tmp_path, 'up', {300: 3.0}, **{
      'moe.num_experts': 4, 'moe.use_bias': True, 'upcycle.step': 100,
      'upcycle.recipe': 'expand_experts'}))   # the bias the replicas' noise perturbs
  assert (row['kind'], row['D1'], row['D2']) == ('upcycled', 100 * 16 * 128, 200 * 16 * 128)
  fixed_8 = collect.row(make_workdir(tmp_path, 'moe8', {300: 3.0}, **{
      'moe.num_experts': 8, 'moe.use_bias': True}))
  assert (row['n_expert'], row['N_total'], row['N2']) == (8, fixed_8['N_total'], fixed_8['N2'])


def test_dense_to_moe_in_run_counts_the_target_experts(tmp_path):
  row = collect.row(make_workdir(tmp_path, 'd2m', {300: 3.0}, **{
      'upcycle.step': 100, 'upcycle.recipe': 'dense_to_moe',
      'upcycle.target': ml_collections.ConfigDict({'moe': {'num_experts': 4}})}))
  dense = collect.row(make_workdir(tmp_path, 'dense', {300: 3.0}))
  assert (row['n_expert'], row['N1']) == (4, dense['N1']) and row['P'] > 1


def _checkpoint_dirs(workdir, *steps):
  for step in steps:   # what resolve() needs to see a step directory
    os.makedirs(os.path.join(workdir, 'checkpoints', str(step), 'params'))


def test_source_takes_d1_and_n1_from_the_source(tmp_path):
  src = make_workdir(tmp_path, 'src', {200: 3.9}, total_steps=200, seq_len=64,
                     **{'model.d_model': 32, 'model.head_dim': 8})
  _checkpoint_dirs(src, 150)
  step_dir = os.path.join(src, 'checkpoints', '150')
  n1_src = collect.row(src)['N1']
  from_step = collect.row(make_workdir(tmp_path, 'a', {300: 3.1}, source=step_dir,
                                       **{'moe.num_experts': 8}))
  assert from_step['kind'] == 'upcycled'
  assert from_step['D1'] == 150 * 16 * 64
  assert from_step['D2'] == 300 * 16 * 128
  assert from_step['N1'] == n1_src != collect.row(make_workdir(tmp_path, 'c', {300: 3.0}))['N1']


@pytest.mark.parametrize('case,match', [
    ('no_val_loss', 'no record has val_loss'),
    ('unfinished', 'last val_loss is at step 200, not total_steps=300'),
    ('source_without_run_json', "missing field 'source.tokens'"),
    ('no_metrics', 'no metrics.jsonl'),
    ('no_run_json', 'no run.json'),
    ('old_run_json', "missing field 'model.dense_nonembed'"),
])
def test_bad_workdirs_are_one_line_errors(tmp_path, case, match):
  val = {'no_val_loss': {}, 'unfinished': {200: 3.0}}.get(case, {300: 3.0})
  kwargs = {}
  if case == 'source_without_run_json':
    src = tmp_path / 'src'
    _checkpoint_dirs(src, 100)
    kwargs['source'] = str(src / 'checkpoints' / '100')
  workdir = make_workdir(tmp_path, case, val, **kwargs)
  run_json = os.path.join(workdir, 'run.json')
  if case == 'no_metrics':
    os.remove(os.path.join(workdir, 'metrics.jsonl'))
  elif case == 'no_run_json':
    os.remove(run_json)
  elif case == 'old_run_json':
    with open(run_json) as f:
      record = json.load(f)
    del record['model']['dense_nonembed']
    with open(run_json, 'w') as f:
      json.dump(record, f)
  with pytest.raises(ConfigError, match=match) as e:
    collect.row(workdir)
  assert '\n' not in str(e.value)
