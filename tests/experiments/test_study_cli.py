"""The seed reports' shared command line: one-line errors, exit status 2."""
import pytest

from tests.experiments import runs


@pytest.mark.parametrize('args, message', [
    ((), 'error: give --workdir=DIR and --table, or --results=FILE'),
    (('--table=3', '--workdir=/tmp', '--out=/tmp/x'), 'error: --out goes with --results (with --workdir the report is written there)'),
    (('--results=/no/such/table3.json',), 'error: --results=/no/such/table3.json is not a file'),
])
def test_bad_arguments_are_one_line(tmp_path, args, message):
  code, out, err = runs.run('experiments.seed000.report', *args, cache_dir=tmp_path)
  assert code == 2 and out == '' and err.strip().splitlines() == [message]
