"""The quickstart's summary from per-seed losses alone: its paired tests and
eta, and what it says where an interval or eta does not exist."""
import json
import os

import pytest

from experiments import quickstart, stats

DOCS_JSON = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'seed000',
                         'quickstart.json')


def _summary(losses, seeds):
  return dict(steps=2250, tau=1125, experts=8, seeds=seeds, losses=losses,
              unigram_entropy=3.39, step_seconds=dict(fixed=0.1, fixed2x=0.11),
              cost=dict(C_up_over_C_fs=0.98, saving_fraction=0.02))


def test_committed_run_eta_is_the_ratio_of_mean_gaps():
  with open(DOCS_JSON) as f:
    s = json.load(f)
  ev = quickstart.evidence(s['losses'])
  fixed, up, f2 = (s['losses'][a] for a in ('fixed', 'upcycled', 'fixed2x'))
  want = (sum(fixed) - sum(up)) / (sum(fixed) - sum(f2))
  assert ev['eta']['estimate'] == pytest.approx(want)
  assert ev['eta']['estimate'] == pytest.approx(0.42, abs=0.005)
  regime = ev['paired']['Fixed-E - Fixed-2E']
  assert regime == {**stats.paired(regime['per_seed']), 'per_seed': regime['per_seed']}
  text = quickstart.text(s)
  assert 'inconclusive (the interval holds 0)' in text and 'p = 0.11' in text
  assert 'every seed by more than 2 standard errors' not in text


def test_one_seed_has_no_interval():
  s = _summary({'fixed': [1.6], 'upcycled': [1.58], 'fixed2x': [1.55], 'sparse': [1.7]}, [0])
  text = quickstart.text(s)
  assert 'one seed: no interval' in text and '0.40 (one seed: no interval)' in text


def test_eta_undefined_without_a_mean_gap():
  s = _summary({'fixed': [1.5, 1.6], 'upcycled': [1.52, 1.58], 'fixed2x': [1.55, 1.6],
                'sparse': [1.7, 1.7]}, [0, 1])
  text = quickstart.text(s)
  assert 'undefined (Fixed-2E is not ahead of Fixed-E on average' in text
  assert 'Fixed-E is better' not in text   # the intervals hold 0 here


def test_read_refuses_a_file_without_per_seed_losses(tmp_path):
  path = tmp_path / 'q.json'
  s = _summary({'fixed': [1.6], 'upcycled': [1.58], 'fixed2x': [1.55]}, [0])
  path.write_text(json.dumps(s))
  with pytest.raises(quickstart.ConfigError, match='losses.sparse'):
    quickstart.read(str(path))
