"""lineage.json records on their own (no training): growing and cutting a
chain, reading it at a checkpoint (step meta, file, or rebuilt from run.json),
broken parent links, imports, and the command's one-line errors. The whole
flow with real checkpoints is tests/workdir/test_lineage_chain.py."""
import os

import pytest

from moe_jax import lineage as lineage_cli
from moe_jax.errors import ConfigError
from moe_jax.workdir import digest, files, lineage, lineage_table
from tests import flag_main

DENSE = dict(num_experts=0, top_k=2, params=100, params_active=100, nonembed=60,
             nonembed_active=60, dense_nonembed=60, flops_per_token=150)
MOE = dict(DENSE, num_experts=4, params=250, nonembed=210, nonembed_active=90)


def _workdir(path, record=None, steps=(), meta=None, run=None):
  """A workdir with lineage.json `record`, run.json `run` and step
  directories (with `meta` as the Orbax meta item)."""
  os.makedirs(path, exist_ok=True)
  if record is not None:
    lineage.write(path, record)
  if run is not None:
    files.write_json(os.path.join(path, files.RUN), run)
  for step in steps:
    os.makedirs(os.path.join(path, 'checkpoints', str(step), 'meta'))
    if meta is not None:
      files.write_json(os.path.join(path, 'checkpoints', str(step), 'meta', 'metadata'),
                       dict(step=step, lineage=meta))
  return str(path)


def _scratch(workdir, tokens_per_step=10):
  return lineage.begin(lineage.stage(workdir, 0, tokens_per_step, DENSE,
                                     lineage.origin('scratch', seed=3)))


def test_a_chain_counts_tokens_across_workdirs_and_in_run_growth(tmp_path):
  dense = _workdir(tmp_path / 'dense', steps=(40, 60))
  lineage.write(dense, _scratch(dense))
  parent, step = lineage.at_checkpoint(os.path.join(dense, 'checkpoints', '40'))
  assert step == 40 and parent['stages'][0]['end_step'] is None
  moe = str(tmp_path / 'moe')
  record = lineage.grow(parent, step, lineage.stage(moe, 0, 20, MOE, lineage.origin(
      'upcycle', dict(checkpoint=f'{dense}/checkpoints/40', step=40), 0,
      report=dict(loss_before=3.0, loss_after=3.0))))
  record = lineage.grow(record, 5, lineage.stage(moe, 5, 20, dict(MOE, num_experts=8, params=400),
                                                 lineage.origin('in_run', dict(step=5),
                                                                recipe='expand_experts', factor=2)))
  first, second, third = record['stages']
  assert (first['end_step'], second['tokens_before']) == (40, 400)
  assert (second['end_step'], third['tokens_before']) == (5, 400 + 5 * 20)
  rows = lineage_table.rows(record, step=9)
  assert [(r['tokens'], r['tokens_total']) for r in rows] == [(400, 400), (100, 500), (80, 580)]
  assert rows[1]['loss_before'] == 3.0 and rows[2]['how'] == 'in-run expand_experts x2 at step 5'
  assert lineage_table.chain(rows) == 'dense 100 -> MoE 4x top-2 250 at step 40 -> MoE 8x top-2 400 ' \
                                'at step 5'
  # The record at a step before the in-run growth has not grown yet; cutting
  # there again and growing (a transition redone after a crash) is idempotent.
  assert len(lineage.cut(record, 4)['stages']) == 2
  regrown = lineage.grow(lineage.cut(record, 4), 5, record['stages'][2])
  assert regrown['stages'] == record['stages']


def test_a_fine_tune_is_a_stage_of_its_own_not_a_growth(tmp_path):
  """init_from (configs/finetune.py) trains the same model on: the chain and
  the model card say fine-tune, not a model grown at that step."""
  moe = str(tmp_path / 'moe')
  record = lineage.begin(lineage.stage(moe, 0, 10, MOE, lineage.origin('scratch', seed=0)))
  ft = str(tmp_path / 'ft')
  record = lineage.grow(record, 30, lineage.stage(ft, 0, 10, MOE, lineage.origin(
      'init_from', dict(checkpoint=f'{moe}/checkpoints/30', step=30), 0)))
  rows = lineage_table.rows(record, step=5)
  assert lineage_table.chain(rows) == 'MoE 4x top-2 250 -> fine-tune from step 30'
  assert rows[1]['how'] == f'fine-tune (init_from {moe}/checkpoints/30)'
  card = lineage_table.markdown(record, step=5)
  assert 'fine-tune from step 30' in card and 'MoE 4x top-2 250 at step 30' not in card


def test_the_step_meta_is_read_before_the_workdir_file(tmp_path):
  meta = _scratch(str(tmp_path / 'elsewhere'))   # as saved, before the workdir moved
  workdir = _workdir(tmp_path / 'w', record=_scratch(str(tmp_path / 'w')), steps=(7,), meta=meta)
  record, step = lineage.at_checkpoint(os.path.join(workdir, 'checkpoints', '7'))
  assert step == 7 and record['stages'][0]['workdir'] == str(tmp_path / 'elsewhere')
  assert lineage.check(record, workdir) == [
      f'the workdir was recorded at {tmp_path}/elsewhere and is now at {workdir}']


def test_missing_parents_are_reported_not_fatal(tmp_path):
  gone = str(tmp_path / 'gone')
  child = str(tmp_path / 'child')
  record = lineage.grow(_scratch(gone), 30, lineage.stage(child, 0, 10, MOE, lineage.origin(
      'upcycle', dict(checkpoint=f'{gone}/checkpoints/30', step=30))))
  _workdir(child, record=record, steps=(2,))
  assert lineage.check(record) == [
      f'stage 1: parent checkpoint {gone}/checkpoints/30 is missing (moved or deleted)']
  os.makedirs(os.path.join(gone, 'checkpoints', '40'))   # the workdir is back, step 30 is not
  assert 'its workdir is there' in lineage.check(record)[0]
  assert flag_main.call(lineage_cli, [child]) == 0
  # A run started from a parent that no longer exists (a --dst written before
  # lineage): the chain begins at a stage of unknown origin that says why.
  run = dict(tokens_per_step=10, model=MOE, source=dict(
      checkpoint=f'{tmp_path}/nowhere/checkpoints/9', step=9))
  record = lineage.for_run(str(tmp_path / 'new'), run, 'upcycle', seed=0)
  root, own = record['stages']
  assert root['origin'] is None and 'parent missing' in root['note']
  assert own['origin']['how'] == 'upcycle' and own['tokens_before'] is None


def test_a_workdir_without_lineage_is_rebuilt_from_run_json(tmp_path):
  run = dict(tokens_per_step=16, model=DENSE, grown=MOE, upcycle_step=4, source=None)
  workdir = _workdir(tmp_path / 'old', run=run, steps=(8,))
  record, step = lineage.at_checkpoint(workdir)
  (only,) = record['stages']
  assert step == 8 and only['model'] == MOE and only['tokens_before'] is None   # grew in-run
  workdir = _workdir(tmp_path / 'old2', run=dict(run, upcycle_step=0), steps=(8,))
  (only,) = lineage.at_checkpoint(workdir)[0]['stages']
  assert only['tokens_before'] == 0 and only['origin'] is None and 'no lineage.json' in only['note']


def test_record_import_and_file_digest(tmp_path):
  src = tmp_path / 'hf'
  src.mkdir()
  (src / 'model.safetensors').write_bytes(b'weights')
  sha = digest.file_digest(str(src))
  assert sha != digest.file_digest(str(src / 'model.safetensors'))
  (src / 'model.safetensors').write_bytes(b'weights!')
  assert digest.file_digest(str(src)) != sha
  workdir = str(tmp_path / 'imported')
  os.makedirs(workdir)
  lineage.write(workdir, lineage.record_import(workdir, DENSE, 'HuggingFaceTB/SmolLM2-135M',
                                               sha, tokens=2e12, arch='llama'))
  # The trainer's first start keeps the import and learns its tokens per step.
  record = lineage.for_run(workdir, dict(tokens_per_step=64, model=DENSE), 'init_from', 0)
  (root,) = record['stages']
  assert root['origin']['how'] == 'hf_import' and root['origin']['arch'] == 'llama'
  assert root['origin']['parent'] == dict(hf='HuggingFaceTB/SmolLM2-135M', sha256=sha)
  assert (root['tokens_before'], root['tokens_per_step']) == (2e12, 64)
  assert 'import HuggingFaceTB/SmolLM2-135M' in lineage_table.markdown(record, step=3)


def test_code_version_names_this_checkout():
  version = lineage.code_version()
  assert len(version['git']) == 40 and isinstance(version['dirty'], bool)


@pytest.mark.parametrize('case, message', [
    ('nowhere', 'does not exist'),
    ('not_a_workdir', 'is not a workdir'),
    ('bad_json', 'lineage.json: not JSON'),
])
def test_bad_inputs_are_one_line_errors(tmp_path, capsys, case, message):
  path = tmp_path / case
  if case != 'nowhere':
    path.mkdir()
  if case == 'bad_json':
    (path / 'lineage.json').write_text('{')
    with pytest.raises(ConfigError, match=message):
      lineage.for_run(str(path), dict(tokens_per_step=1, model=DENSE), 'init_from', 0)
    # Reading it as a parent is not fatal: the stage says the record is unreadable.
    (stage,) = lineage.at_checkpoint(str(path))[0]['stages']
    assert 'lineage unreadable' in stage['note']
    return
  assert flag_main.call(lineage_cli, [str(path)]) == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and err.startswith('error: ') and message in err


def test_a_workdir_other_code_wrote_starts_with_an_unknown_origin(tmp_path):
  """An importer that records no lineage: the trainer's first start does not
  call the imported model trained from scratch."""
  workdir = _workdir(tmp_path / 'imported', steps=(0,))
  (first,) = lineage.for_run(workdir, dict(tokens_per_step=8, model=DENSE), 'init_from',
                             0)['stages']
  assert first['origin'] is None and first['tokens_before'] is None and 'unknown' in first['note']
  (fresh,) = lineage.for_run(str(tmp_path / 'new'), dict(tokens_per_step=8, model=DENSE),
                             'init_from', 0)['stages']
  assert fresh['origin']['how'] == 'scratch' and fresh['tokens_before'] == 0
