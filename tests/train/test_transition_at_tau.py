"""The in-run transition at step tau, exactly: step tau runs the source model
and grows after it, so step tau's metrics carry the growth report, step tau + 1
is the first on the grown model, and the step-tau checkpoint already holds the
grown params (config_at(tau) is the grown config). A transition one step late
(`step > tau` for `step >= tau`) passes a test that only looks before and well
after tau."""
import json
import os

import ml_collections

from moe_jax.eval import restore
from moe_jax.train import trainer
from moe_jax.upcycle import transition
from tests.train import tiny

TAU = 2


def _config():
  c = tiny.config(**{'moe.num_experts': 0, 'total_steps': TAU + 2, 'eval_every_steps': 0,
                     'checkpoint_every_steps': 0})
  c.upcycle.update(step=TAU, recipe='dense_to_moe', report_batches=1)
  c.upcycle.target = ml_collections.ConfigDict({'moe': {'num_experts': 4, 'top_k': 2}})
  return c


def test_config_at_is_the_grown_one_from_tau_on():
  config = _config()
  experts = {s: transition.config_at(config, s).moe.num_experts for s in (TAU - 1, TAU, TAU + 1)}
  assert experts == {TAU - 1: 0, TAU: 4, TAU + 1: 4}
  config.upcycle.step = 0   # no transition: every step is the source's
  assert transition.config_at(config, TAU).moe.num_experts == 0


def test_step_tau_grows_after_it_runs_and_a_resume_at_tau_continues_grown(tmp_path):
  workdir = str(tmp_path / 'run')
  trainer.train_and_evaluate(_config(), workdir, stop_at=TAU)   # saves step tau, grown
  trainer.train_and_evaluate(_config(), workdir)                # resumes from step tau
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    rows = {r['step']: r for r in map(json.loads, f)}
  experts = lambda step: len(rows[step].get('moe/layers_0/load', ()))   # 0: a dense step
  report = lambda step: [k for k in rows[step] if k.startswith('upcycle/')]
  assert (report(TAU - 1), experts(TAU - 1)) == ([], 0)
  assert report(TAU) and experts(TAU) == 0                     # ran dense, then grew
  assert (report(TAU + 1), experts(TAU + 1)) == ([], 4)
  # The step-tau checkpoint is the grown model, read through config_at(tau).
  loaded = restore.load(os.path.join(workdir, 'checkpoints', str(TAU)))
  assert loaded.step == TAU and loaded.params['layers_0']['moe']['experts']['wi_0'].shape[0] == 4
