"""In-run upcycling at step tau: the model grows in memory, checkpoints after
tau hold the grown model, and a run resumed on either side of tau logs what an
uninterrupted one does."""
import json
import os
import shutil

import ml_collections
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.eval import norms, restore, validation
from moe_jax.train import trainer
from moe_jax.workdir import checkpoint, files
from tests.train import tiny


def _expand(**overrides):
  c = tiny.config(**overrides)
  c.upcycle.update(step=3, recipe='expand_experts', factor=2)
  c.upcycle.args = ml_collections.ConfigDict(dict(delta=0.0))
  return c


def _rows(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def _experts(workdir, step):
  manager = checkpoint.Manager(os.path.join(workdir, 'checkpoints'), async_save=False)
  meta = manager._manager.item_metadata(step)['params']  # pylint: disable=protected-access
  shape = meta.tree['layers_0']['moe']['experts']['wi_0'].shape
  manager.close()
  return shape[0]


@pytest.mark.parametrize('stop,scan', [(4, False), (4, True),
                                       pytest.param(2, False, marks=pytest.mark.slow)])
def test_expand_experts_in_run_and_resume_across_tau(tmp_path, stop, scan):
  """Interrupted after tau (restores the grown shape) or before (grows on
  resume). With scan_layers the train state is stacked (models/stacking.py)
  and everything here (checkpoints, the transition, evaluation, norms) sees
  `layers_{i}`."""
  keys = {'model.scan_layers': scan}
  straight = str(tmp_path / 'straight')
  trainer.train_and_evaluate(_expand(**keys), straight)
  rows = _rows(straight)
  grown = next(r for r in rows if r['step'] == 3)
  assert 'upcycle/loss_before' in grown and np.isfinite(grown['upcycle/loss_after'])
  assert len(grown['moe/layers_0/load']) == 4       # the step itself ran on 4 experts
  assert len(rows[-1]['moe/layers_0/load']) == 8    # later steps on 8
  assert _experts(straight, 3) == 8 and _experts(straight, 6) == 8
  # The evaluator sees the grown model in a checkpoint past tau.
  result = validation.evaluate_checkpoint(straight)
  assert result['step'] == 6 and result['val_loss'] == pytest.approx(rows[-1]['val_loss'],
                                                                     rel=1e-5)
  # Eval steps log the layer-wise norms of the params they evaluated.
  want = norms.flat(norms.layer_norms(restore.load(straight).params))
  assert want and {k: rows[-1][k] for k in want} == pytest.approx(want, rel=1e-6)

  resumed = str(tmp_path / 'resumed')
  trainer.train_and_evaluate(_expand(**keys), resumed, stop_at=stop)
  trainer.train_and_evaluate(_expand(**keys), resumed)
  got = [(r['step'], r['loss']) for r in _rows(resumed)]
  np.testing.assert_allclose(got, [(r['step'], r['loss']) for r in rows], rtol=0, atol=0)


def test_a_branch_of_fixed_e_at_tau_grows_first_and_matches_the_in_run_upcycle(tmp_path):
  # Fixed-E and Upcycled share their first tau steps; a sweep trains them once
  # and starts the upcycled run from Fixed-E's step-tau checkpoint.
  straight, fixed, branch = (str(tmp_path / n) for n in ('straight', 'fixed', 'branch'))
  trainer.train_and_evaluate(_expand(), straight)
  trainer.train_and_evaluate(tiny.config(), fixed)
  shutil.copytree(os.path.join(fixed, 'checkpoints', '3'),
                  os.path.join(branch, 'checkpoints', '3'))
  trainer.train_and_evaluate(_expand(), branch)
  want = [(r['step'], r['loss']) for r in _rows(straight) if r['step'] > 3]
  rows = _rows(branch)
  assert rows[0]['step'] == 3 and 'upcycle/loss_after' in rows[0]
  np.testing.assert_allclose([(r['step'], r['loss']) for r in rows[1:]], want, rtol=0, atol=0)
  assert _experts(branch, 6) == 8
  report = files.read_report(branch)
  counts = report['recipe']['args']['counts']   # uniform duplication: two copies of each of 4
  assert counts and all(c == [2, 2, 2, 2] for c in counts.values())
  # The CLI's schema (transition.report_record): where it grew from, the recipe, its seed.
  assert (report['source'], report['step'], report['seed']) == (os.path.abspath(branch), 3, 0)
  assert report['recipe']['recipe'] == 'expand_experts' and report['recipe']['rules']


def test_dense_to_moe_in_run_preserves_the_function(tmp_path):
  c = tiny.config(**{'moe.num_experts': 0, 'total_steps': 4, 'eval_every_steps': 0})
  c.upcycle.update(step=2, recipe='dense_to_moe', report_batches=2)
  c.upcycle.target = ml_collections.ConfigDict({'moe': {'num_experts': 4, 'top_k': 2}})
  workdir = str(tmp_path / 'run')
  trainer.train_and_evaluate(c, workdir)
  with open(os.path.join(workdir, 'upcycle_report.json')) as f:
    report = json.load(f)
  assert report['max_abs_dlogits'] < 1e-5
  assert report['loss_before'] == pytest.approx(report['loss_after'], abs=1e-5)


def test_tau_past_the_run_is_refused(tmp_path):
  c = _expand()
  c.upcycle.step = 6
  with pytest.raises(ConfigError, match='upcycle.step=6 must be below total_steps=6'):
    trainer.train_and_evaluate(c, str(tmp_path / 'run'))
  assert not os.path.exists(tmp_path / 'run')
