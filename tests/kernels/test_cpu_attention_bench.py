"""experiments/bench/cpu_attention.py runs end to end, checks the blocked path
against the reference and refuses unknown cases. Timings are not checked."""
import json

import pytest

from experiments.bench import cpu_attention


@pytest.mark.slow
def test_attention_benchmark_runs_and_checks(tmp_path):
  out = tmp_path / 'attention.json'
  cpu_attention.main(['--out', str(out), '--cases=quickstart', '--reps=1'])
  [case] = json.loads(out.read_text())['results']
  assert case['check']['ok'] and case['query_block'] == 0
  assert {'reference', 'blocked'} <= set(case['fwd_bwd_cpu_ms'])


def test_unknown_case_is_refused(tmp_path, capsys):
  with pytest.raises(SystemExit) as e:
    cpu_attention.main(['--out', str(tmp_path / 'a.json'), '--cases=huge'])
  assert e.value.code == 2 and '--cases=huge' in capsys.readouterr().err
  assert not (tmp_path / 'a.json').exists()
