"""experiments.rerun: a committed results file's run launched again at HEAD,
committed against now, and the refusals that keep it away from the docs.

rerun_fixture.json is what `python -m experiments.quickstart --arg=small`
wrote (one seed of configs/quickstart.py:small, 8 steps)."""
import copy
import json
import os
import subprocess
import sys

import pytest

from experiments import provenance, rerun
from moe_jax.errors import ConfigError
from tests.experiments import runs

_FIXTURE = os.path.join(os.path.dirname(__file__), 'rerun_fixture.json')


def test_the_quickstart_file_names_its_sweep_and_runs_in_launch_order():
  spec, losses, configs = rerun.committed(_FIXTURE)
  assert spec == 'configs/quickstart.py:small'
  assert list(losses) == ['fixed_s0', 'upcycled_s0', 'fixed2x_s0', 'sparse_s0']
  assert losses['fixed2x_s0'] == json.load(open(_FIXTURE))['losses']['fixed2x'][0]
  assert set(configs.values()) == {None}


def test_committed_files_without_a_sweep_key_map_to_their_sweeps():
  spec, losses, _ = rerun.committed(os.path.join(runs.REPO, 'docs/seed000/quickstart.json'))
  assert spec == 'configs/quickstart.py:steps=2250,experts=8,seeds=3' and len(losses) == 12
  spec, losses, configs = rerun.committed(
      os.path.join(runs.REPO, 'docs/seed000/table5_3seeds.json'))
  assert spec == 'experiments/seed000/table5.py' and 'k2_s0_up_8' in losses
  assert configs['k2_s0_up_8']['moe']['num_experts'] == 8


def test_config_changes_name_the_keys_that_moved():
  assert rerun.config_changes({'a': 1, 'b': {'c': 2}}, {'a': 1, 'b': {'c': 3, 'd': 0}}) == [
      'b.c: 2 -> 3', 'b.d: <none> -> 0']


def test_a_committed_config_from_before_the_recipe_args_moved_compares_as_the_same_run():
  """Table 5's top-1 expand_experts run kept split_bias on the upcycle group
  (and the other two keys at their defaults); today its sweep sets it in
  upcycle.args, and a sweep may set a moved key at its default there."""
  _, _, configs = rerun.committed(os.path.join(runs.REPO, 'docs/seed000/table5_3seeds.json'))
  old = configs['k1_s0_up_4']
  assert old['upcycle']['split_bias'] is True and old['upcycle']['args'] == {}
  now = copy.deepcopy(old)
  for key in ('split_bias', 'utility_metric', 'utility_batches'):
    del now['upcycle'][key]
  now['upcycle']['args'] = {'split_bias': True, 'utility_metric': 'grad_norm'}
  assert rerun.config_changes(old, now) == []
  now['upcycle']['args'] = {}
  assert rerun.config_changes(old, now) == ['upcycle.args.split_bias: True -> <none>']


@pytest.mark.parametrize('kwargs, message', [
    (dict(runs=-1), '--runs=-1'),
    (dict(only=['nope']), '--only: nope'),
    (dict(out=_FIXTURE), 'must lie outside --results'),
    (dict(workdir=os.path.join(runs.REPO, 'docs', 'rerun')), 'lies in docs/'),
])
def test_bad_input_is_refused_before_anything_runs(kwargs, message):
  with pytest.raises(ConfigError, match=message):
    rerun.rerun(_FIXTURE, **kwargs)


def test_one_run_is_launched_again_and_compared(tmp_path):
  out = tmp_path / 'drift.json'
  proc = subprocess.run([sys.executable, '-m', 'experiments.rerun', f'--results={_FIXTURE}',
                         '--runs=1', f'--out={out}'], cwd=tmp_path,
                        env=runs.env(tmp_path / 'cache', TMPDIR=str(tmp_path)),
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  got = json.loads(out.read_text())
  assert [r['name'] for r in got['runs']] == ['fixed_s0']
  r = got['runs'][0]
  assert r['committed'] == json.load(open(_FIXTURE))['losses']['fixed'][0]
  assert r['drift'] == r['now'] - r['committed'] and got['max_abs_drift'] == abs(r['drift'])
  assert provenance.missing(got) == []
  assert f'{r["drift"]:+18.6f}' in proc.stdout and 'largest |drift|' in proc.stdout
  assert not any(p.name.startswith('rerun_') for p in tmp_path.iterdir())   # nothing left here


def test_the_largest_drift_is_the_largest_in_size_whatever_its_sign(tmp_path, monkeypatch):
  """Runs relaunched by a stand-in for the launcher: one drifts -0.5, the
  others by less either way; the largest |drift| is 0.5."""
  _, losses, _ = rerun.committed(_FIXTURE)
  drifts = dict(zip(losses, (0.01, -0.5, 0.2, 0.0)))
  monkeypatch.setattr(rerun.launch, 'launch', lambda *a, **k: 0)
  monkeypatch.setattr(rerun.report, 'load_runs', lambda workdir: [
      dict(name=n, state='done', config=None, metrics=[dict(step=8, val_loss=losses[n] + d)])
      for n, d in drifts.items()])
  got = rerun.rerun(_FIXTURE, workdir=str(tmp_path / 'runs'))
  assert [r['drift'] for r in got['runs']] == pytest.approx(list(drifts.values()), abs=1e-12)
  assert got['max_abs_drift'] == pytest.approx(0.5, abs=1e-12)
  assert 'largest |drift|: 0.500000 over 4 runs' in rerun.text(got)


@pytest.mark.parametrize('dry_run', [False, True])
def test_a_non_empty_workdir_is_refused_before_launching(tmp_path, monkeypatch, dry_run):
  """A finished sweep in --workdir would be found done by the launcher, and
  the "rerun" would compare the old losses with themselves (drift +0)."""
  (tmp_path / 'sweep.json').write_text('{}')
  monkeypatch.setattr(rerun.launch, 'launch', lambda *a, **k: pytest.fail('launched'))
  with pytest.raises(ConfigError, match=f'--workdir={tmp_path} exists and is not an empty'):
    rerun.rerun(_FIXTURE, runs=1, workdir=str(tmp_path), dry_run=dry_run)
  assert os.listdir(tmp_path) == ['sweep.json']


@pytest.mark.parametrize('out', ['', 'drift.json'])
def test_out_and_workdir_are_apart(tmp_path, monkeypatch, out):
  """--out is written after the runs: in or at --workdir it would fail then, or
  land among them."""
  monkeypatch.setattr(rerun.launch, 'launch', lambda *a, **k: pytest.fail('launched'))
  workdir = tmp_path / 'rerun'
  with pytest.raises(ConfigError, match='--out=.* must lie outside --workdir'):
    rerun.rerun(_FIXTURE, runs=1, workdir=str(workdir), out=str(workdir / out))
  assert os.listdir(tmp_path) == []
