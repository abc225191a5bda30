"""A disk that fills while an output is written: export_hf and
`scaling_laws fit --out` stop with one `error:` line (exit 1), leaving no
partial output behind."""
import errno
import os

from moe_jax import atomic
from moe_jax.scaling_laws import __main__ as laws_cli
from tests.scaling_laws import synthetic
from tests.robustness import harness


def test_export_hf_on_a_full_disk(cli, trained, small_filesystem):
  disk = small_filesystem(256 << 10)   # room for the small files, not the weights
  before = harness.tree_digest(trained)
  result = cli.run('moe_jax.interop.export_hf', f'--ckpt={trained}', f'--out={disk}/hf')
  harness.assert_one_error_line(result, 1, r'No space left on device')
  assert os.listdir(disk) == [] and harness.tree_digest(trained) == before


def test_fit_out_on_a_full_disk(tmp_path, capsys, monkeypatch):
  synthetic.write_upcycled_table(str(tmp_path / 'runs.jsonl'))

  def full(_):   # where a full disk reports it: the flush to disk
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  monkeypatch.setattr(atomic.os, 'fsync', full)
  code = laws_cli.main(['fit', f'--runs={tmp_path}/runs.jsonl', '--form=joint', '--kind=upcycled',
                        '--fix=E=0.165', '--max_inits=2', f'--out={tmp_path}/fit.json'])
  err = capsys.readouterr().err
  assert code == 1 and err.splitlines() == [
      f'error: {tmp_path}/fit.json: cannot write (No space left on device)'], err
  assert sorted(os.listdir(tmp_path)) == ['runs.jsonl']
