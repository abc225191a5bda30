"""The upcycle CLI end to end on tiny checkpoints: exactness report, --src never
touched, --dst whole or absent, and the grown workdir trains and evaluates."""
import hashlib
import json
import os
import subprocess
import sys

import orbax.checkpoint as ocp
import pytest

from configs.upcycle import dense_to_moe, expand_experts
from moe_jax.errors import ConfigError
from moe_jax.eval import validation
from moe_jax.scaling_laws import collect
from moe_jax.train import trainer
from moe_jax.upcycle import run, transition, utility
from tests.train import tiny

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _digest(root):
  h = hashlib.sha256()
  for d, _, files in sorted(os.walk(root)):
    for name in sorted(files):
      with open(os.path.join(d, name), 'rb') as f:
        h.update(name.encode() + f.read())
  return h.hexdigest()


@pytest.fixture(scope='module')
def dense_workdir(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('dense') / 'run')
  trainer.train_and_evaluate(tiny.config(**{'moe.num_experts': 0, 'total_steps': 2}), workdir)
  return workdir


def test_dense_to_moe_cli_is_exact_and_leaves_src_alone(dense_workdir, tmp_path):
  before = _digest(dense_workdir)
  dst = str(tmp_path / 'moe')
  env = dict(os.environ, PYTHONPATH=_REPO)
  proc = subprocess.run(
      [sys.executable, '-m', 'moe_jax.upcycle', '--config=configs/upcycle/dense_to_moe.py:experts=4',
       f'--src={dense_workdir}', f'--dst={dst}'], cwd=_REPO, env=env, capture_output=True,
      text=True, check=False)
  assert proc.returncode == 0, proc.stderr
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  assert report['max_abs_dlogits'] < 1e-5
  assert report['loss_after'] == pytest.approx(report['loss_before'], abs=1e-5)
  assert _digest(dense_workdir) == before
  assert sorted(os.listdir(dst)) == ['checkpoints', 'config.json', 'lineage.json', 'run.json',
                                     'upcycle_report.json']
  # The grown workdir evaluates to the reported loss and trains on.
  result = validation.evaluate_checkpoint(dst)
  assert result['step'] == 0 and result['val_loss'] == pytest.approx(report['loss_after'],
                                                                     abs=1e-4)
  # The README's flow: train the grown workdir with a config that knows nothing
  # of its source; run.json keeps the source, so collect sees an upcycled run.
  trainer.train_and_evaluate(tiny.config(**{'moe.num_experts': 4, 'moe.use_bias': True,
                                            'total_steps': 2,
                                            'eval_every_steps': 2}), dst)
  row = collect.row(dst)
  assert (row['kind'], row['D1'], row['D2']) == ('upcycled', 2 * 8 * 32, 2 * 8 * 32)
  assert row['N1'] == collect.row(dense_workdir)['N1'] and row['n_expert'] == 4


@pytest.fixture(scope='module')
def moe_workdir(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('moe') / 'run')
  trainer.train_and_evaluate(tiny.config(**{'total_steps': 2, 'moe.use_bias': True}), workdir)
  return workdir


def test_utility_expansion_saves_scores_and_overwrite_replaces(moe_workdir, tmp_path):
  dst = tmp_path / 'x2'
  dst.mkdir()
  (dst / 'old.txt').write_text('old')
  up = expand_experts.get_config('allocation=utility,metric=saliency,batches=2,delta=0.01,'
                                 'rule=proportional')
  report = run.upcycle_checkpoint(up, moe_workdir, str(dst), overwrite=True)
  assert not (dst / 'old.txt').exists() and os.listdir(tmp_path) == ['x2']
  assert report['loss_after'] != report['loss_before']   # top-k fixed: copies tie, not exact
  # The one schema of transition.report_record (the in-run transition writes it too).
  assert (report['source'], report['step'], report['seed']) == (
      os.path.join(moe_workdir, 'checkpoints', '2'), 2, 0)
  assert json.loads(json.dumps(report)) == json.loads((dst / 'upcycle_report.json').read_text())
  with open(dst / 'upcycle_scores.json') as f:
    scores = json.load(f)
  assert scores['metric'] == 'saliency' and scores['num_batches'] == 2
  assert scores['allocation'] == 'proportional'
  for layer in ('layers_0', 'layers_1'):
    record = scores['layers'][layer]
    assert len(record['scores']) == 4 and sum(record['counts']) == 8
    assert min(record['counts']) >= 1
    assert record['counts'] == list(utility.allocate(record['scores'], 2, 'proportional'))
    assert report['recipe']['args']['counts'][layer] == record['counts']   # the report's too
  assert json.loads((dst / 'config.json').read_text())['moe']['num_experts'] == 8


def _data_position(workdir, step):
  manager = ocp.CheckpointManager(os.path.join(workdir, 'checkpoints'),
                                  item_handlers={'data': ocp.JsonCheckpointHandler()})
  return manager.restore(step, args=ocp.args.Composite(data=ocp.args.JsonRestore()))['data']


def test_heuristic_variant_from_the_command_line_and_cpt_continues_the_data(moe_workdir,
                                                                           tmp_path):
  dst = str(tmp_path / 'noise')
  proc = subprocess.run(
      [sys.executable, '-m', 'moe_jax.upcycle',
       '--config=configs/upcycle/expand_experts.py:expert=copy_noise',
       '--config.args.expert_args.lam=0.05', f'--src={moe_workdir}', f'--dst={dst}'],
      cwd=_REPO, env=dict(os.environ, PYTHONPATH=_REPO), capture_output=True, text=True,
      check=False)
  assert proc.returncode == 0, proc.stderr
  with open(os.path.join(dst, 'upcycle_report.json')) as f:
    args = json.load(f)['recipe']['args']
  assert args['expert_heuristic'] == 'copy_noise' and args['expert_args'] == {'lam': 0.05}
  assert args['delta'] == 1e-3   # seed 000 Definition 3.1's router-bias noise, on by default
  # CPT reads on from where pre-training stopped (2 steps), not from the start.
  assert _data_position(dst, 0) == _data_position(moe_workdir, 2) == {'next_index': 2}
  trainer.train_and_evaluate(tiny.config(**{'moe.num_experts': 8, 'moe.use_bias': True,
                                            'total_steps': 3, 'eval_every_steps': 0}), dst)
  assert _data_position(dst, 3) == {'next_index': 5}


def test_an_upcycled_workdir_trains_on_another_stream_from_its_start(dense_workdir, tmp_path,
                                                                     caplog):
  """Seed 004: a dense model grown, then fine-tuned on other data. The step-0
  position belongs to the source's stream; once a run has saved a checkpoint,
  its own stream is the workdir's."""
  dst = str(tmp_path / 'moe')
  run.upcycle_checkpoint(dense_to_moe.get_config('experts=4,bias=False'), dense_workdir, dst)
  assert _data_position(dst, 0) == {'next_index': 2}
  other = {'moe.num_experts': 4, 'total_steps': 3, 'eval_every_steps': 0, 'seed': 1}
  trainer.train_and_evaluate(tiny.config(**other), dst)
  assert 'another data stream (seed: workdir 0 vs requested 1)' in caplog.text
  assert _data_position(dst, 3) == {'next_index': 3}
  with pytest.raises(ConfigError, match=r'another data stream \(seed: workdir 1 vs requested 0'):
    trainer.train_and_evaluate(tiny.config(**dict(other, seed=0, total_steps=4)), dst)


def test_existing_dst_is_refused_and_kept(dense_workdir, tmp_path):
  dst = tmp_path / 'taken'
  dst.mkdir()
  (dst / 'precious.txt').write_text('keep me')
  with pytest.raises(ConfigError, match='exists; pass --overwrite'):
    run.upcycle_checkpoint(dense_to_moe.get_config('experts=4'), dense_workdir, str(dst))
  assert (dst / 'precious.txt').read_text() == 'keep me'


def test_failure_midway_leaves_no_dst(dense_workdir, tmp_path, monkeypatch):
  def broken(*args, **kwargs):
    raise RuntimeError('disk full')
  monkeypatch.setattr(transition, 'preservation_report', broken)
  with pytest.raises(RuntimeError, match='disk full'):
    run.upcycle_checkpoint(dense_to_moe.get_config('experts=4'), dense_workdir,
                           str(tmp_path / 'new'))
  assert os.listdir(tmp_path) == []


def test_bad_inputs_are_one_line_errors(dense_workdir, tmp_path):
  with pytest.raises(ConfigError, match='must lie outside --src'):
    run.upcycle_checkpoint(dense_to_moe.get_config(), dense_workdir,
                           os.path.join(dense_workdir, 'x'))
  with pytest.raises(ConfigError, match='upcycle.factor=1 must be an integer >= 2'):
    run.upcycle_checkpoint(expand_experts.get_config('factor=1'), dense_workdir,
                           str(tmp_path / 'x'))
  with pytest.raises(ConfigError, match='the source is dense'):
    run.upcycle_checkpoint(expand_experts.get_config(), dense_workdir, str(tmp_path / 'x'))
  with pytest.raises(ConfigError, match=r'moe.top_k=9'):
    run.upcycle_checkpoint(dense_to_moe.get_config('experts=4,top_k=9'), dense_workdir,
                           str(tmp_path / 'x'))
  assert os.listdir(tmp_path) == []


def test_source_of_another_shape_is_refused(dense_workdir, tmp_path):
  # A copy of the source whose config.json claims a wider model.
  src = tmp_path / 'src'
  subprocess.run(['cp', '-r', dense_workdir, str(src)], check=True)
  config = json.loads((src / 'config.json').read_text())
  config['model']['d_ff'] = 128
  (src / 'config.json').write_text(json.dumps(config))
  with pytest.raises(ConfigError, match=r"does not match the config: .*'wi_0'.*"):
    run.upcycle_checkpoint(dense_to_moe.get_config('experts=4'), str(src), str(tmp_path / 'x'))
  assert not (tmp_path / 'x').exists()
