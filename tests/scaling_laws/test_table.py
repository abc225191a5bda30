"""Runs tables load from CSV and JSON lines and refuse bad input in one line."""
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import table

CSV = """kind,N1,N2,N_total,D1,D2,P,n_expert,top_k,loss
dense,1e8,,,2e9,0,,,,3.1
upcycled,1e8,1.75e8,6e8,2e9,4e9,3.43,8,2,2.9
"""


def test_csv_and_jsonl_load_the_same_table(tmp_path):
  (tmp_path / 'runs.csv').write_text(CSV)
  cols = table.load(str(tmp_path / 'runs.csv'))
  table.write(cols, str(tmp_path / 'runs.jsonl'))
  again = table.load(str(tmp_path / 'runs.jsonl'))
  assert list(cols['kind']) == list(again['kind']) == ['dense', 'upcycled']
  for name in table.COLUMNS[1:]:
    np.testing.assert_array_equal(cols[name], again[name])
  assert np.isnan(cols['N2'][0]) and cols['D2'][1] == 4e9


def test_select_and_check(tmp_path):
  (tmp_path / 'runs.csv').write_text(CSV)
  cols = table.load(str(tmp_path / 'runs.csv'))
  up = table.select(cols, 'upcycled')
  table.check(up, ('D1', 'D2', 'N1'), 'form joint')
  with pytest.raises(ConfigError, match="column 'D2' must be finite and > 0 for form joint; row 0"):
    table.check(cols, ('D1', 'D2', 'N1'), 'form joint')
  with pytest.raises(ConfigError, match="no rows of kind 'moe'"):
    table.select(cols, 'moe')


@pytest.mark.parametrize('text,name,match', [
    ('kind,loss\nsparse,1.0\n', 'a.csv', "kind 'sparse' is not one of"),
    ('{"loss": 1.0}\nnot json\n', 'a.jsonl', 'line 2 is not JSON'),
    ('{"loss": 1.0}\n[1, 2]\n', 'a.jsonl', 'line 2 is a JSON list, not an object'),
    ('kind,loss\nmoe,1.0,7\n', 'a.csv', 'line 2 has 3 fields, the header 2'),
    ('kind,loss\nmoe\n', 'a.csv', 'line 2 has 1 fields, the header 2'),
    (b'kind,loss\nmo\xe9,1.0\n', 'a.csv', 'not UTF-8'),
    ('', 'a.jsonl', 'no rows'),
])
def test_bad_tables(tmp_path, text, name, match):
  if isinstance(text, bytes):
    (tmp_path / name).write_bytes(text)
  else:
    (tmp_path / name).write_text(text)
  with pytest.raises(ConfigError, match=match):
    table.load(str(tmp_path / name))
  with pytest.raises(ConfigError, match='no such file'):
    table.load(str(tmp_path / 'missing.csv'))
