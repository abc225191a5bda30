"""The training-step benchmark runs end to end on CPU (--small): one row per
batch size of a `--batch_per_device` sweep and per `--loss_chunk`, each
carrying the remat policy and loss chunk it ran under. Timings are not
checked: not a timed test."""
import json
import math

import pytest

from experiments.bench import mesh_step


@pytest.mark.slow
def test_batch_sweep_writes_one_row_per_batch(tmp_path):
  out = tmp_path / 'step.json'
  mesh_step.main(['--small', f'--out={out}', '--meshes=data=1', '--batch_per_device=1,2',
                  '--remat=full', '--loss_chunk=0,16'])
  rows = json.loads(out.read_text())['results']
  assert [(r['global_batch'], r['loss_chunk']) for r in rows] == [(1, 0), (1, 16), (2, 0), (2, 16)]
  for whole, chunked in (rows[:2], rows[2:]):   # the same steps, the loss by chunks
    assert chunked['loss'] == pytest.approx(whole['loss'], rel=1e-5)
  for row in rows:
    assert 'error' not in row, row
    assert row['remat'] == 'full'
    assert math.isfinite(row['loss']) and row['step_ms'] > 0
    assert row['mfu'] is None and row['mfu_with_logits'] is None   # CPU: no nominal peak


def test_bad_mesh_is_refused():
  with pytest.raises(mesh_step.ConfigError, match='--meshes'):
    mesh_step.parse_meshes('data=2,bogus=4')
