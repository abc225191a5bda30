"""The merge recipe on imported checkpoints: two imported Qwen3 workdirs
(the fixture, once imported and once copied) merge into one MoE that exports
as Qwen3-MoE with each expert its source's MLP. Identical sources make every
router exact, so the report must show no change."""
import os
import shutil

import numpy as np

from configs.upcycle import merge
from moe_jax.interop import exporter, safetensors_io
from moe_jax.upcycle import run
from moe_jax.workdir import lineage
from tests.interop import fixtures
from tests.interop.test_workdir import imported  # noqa: F401  (the fixture)


def test_merged_imports_export_as_qwen3_moe(imported, tmp_path):  # noqa: F811
  other = str(tmp_path / 'copy')
  shutil.copytree(imported, other)
  merged = str(tmp_path / 'merged')
  report = run.upcycle_checkpoint(merge.get_config('per_source=2,top_k=2,router=hidden,'
                                                        'batches=1'), [imported, other], merged)
  for r in report['sources']:
    assert r['max_abs_dlogits'] < 1e-5 and abs(r['loss_after'] - r['loss_before']) < 1e-5
  origin = lineage.read(merged)['stages'][-1]['origin']
  assert [p['checkpoint'] for p in origin['parents']] == [r['source'] for r in report['sources']]
  assert origin['parent_lineages'][0]['stages'][0]['origin']['how'] == 'hf_import'
  assert os.path.exists(os.path.join(merged, 'tokenizer.json'))

  out = str(tmp_path / 'hf')
  assert exporter.export_checkpoint(merged, out)['arch'] == 'qwen3_moe'
  _, dense = safetensors_io.read_dir(fixtures.path('qwen3_qk_norm'))
  _, tensors = safetensors_io.read_dir(out)
  for name, w in dense.items():
    copies = ([name.replace('mlp.', f'mlp.experts.{e}.') for e in range(4)] if '.mlp.' in name
              else [name])
    for copy in copies:
      np.testing.assert_allclose(tensors[copy], np.asarray(w, np.float32), rtol=1e-6,
                                 err_msg=copy)
