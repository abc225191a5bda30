"""plan --memory with a device of no bytes, and a merge of one checkpoint with
itself (the same path, a link to it, its workdir beside its newest step):
one `error:` line, exit 2, nothing written."""
import os

import pytest

from tests.robustness import rows
from tests.robustness.rows import param

_MERGE = '--config={configs}/upcycle/merge.py --dst={tmp}/merged --src='

ROWS = [
    param('plan_device_memory_zero', '--memory --config={cfg} --device_memory=0GB',
          r"--device_memory='0GB' must be at least 1 byte", module='moe_jax.plan'),
    param('merge_the_same_path_twice', _MERGE + '{wd},{wd}',
          r'--src names checkpoint .*/checkpoints/2 twice', module='moe_jax.upcycle'),
    param('merge_a_link_to_a_source', _MERGE + '{wd},{tmp}/link',
          r'--src names checkpoint .*/checkpoints/2 twice \(.* and .*/link\)',
          lambda p: os.symlink(p['wd'], os.path.join(p['tmp'], 'link')), module='moe_jax.upcycle'),
    param('merge_a_workdir_and_its_newest_step', _MERGE + '{wd},{wd}/checkpoints/2',
          r'--src names checkpoint .*/checkpoints/2 twice', module='moe_jax.upcycle'),
]


@pytest.mark.parametrize('row', ROWS)
def test_refuses_bad_input(cli, trained, tmp_path, row):
  rows.check(cli, row.module, row, tmp_path, trained)
