"""Parity with transformers on the committed fixtures (no torch needed here).

Import: our logits on the fixture's tokens are transformers' within 1e-4.
Export: writing the imported params back gives the fixture's tensors bit for
bit and a config.json that imports to the same model; for the fixtures our
exporter wrote from moe_jax models, that closes the loop "export, load in
transformers, same logits".
"""
import numpy as np
import pytest

from moe_jax.data.tokenizer import BpeTokenizer
from moe_jax.interop import archs, exporter, importer, safetensors_io
from tests.interop import fixtures


@pytest.mark.parametrize('name', fixtures.NAMES)
def test_import_matches_transformers(name):
  config, params, _, _, _ = importer.convert(fixtures.path(name), fixtures.base_config())
  tokens, want = fixtures.reference(name)
  got = fixtures.logits(config, params, tokens)
  assert np.max(np.abs(got - want)) < 1e-4
  assert np.std(want) > 0.5   # O(1) logits: a layout mistake would move them by O(1)


@pytest.mark.parametrize('name', fixtures.NAMES)
def test_export_gives_back_the_checkpoint(name):
  config, params, _, _, arch = importer.convert(fixtures.path(name), fixtures.base_config())
  files = exporter.hf_files(config, params, archs.pick(config, arch),
                            BpeTokenizer.load(fixtures.TOKENIZER))
  hf_config, tensors = safetensors_io.read_dir(fixtures.path(name))
  assert sorted(files.tensors) == sorted(tensors)
  for key, w in tensors.items():
    np.testing.assert_array_equal(files.tensors[key], np.asarray(w, np.float32), err_msg=key)
  assert archs.from_hf(files.config) == archs.from_hf(hf_config)


def test_upcycled_export_keeps_the_dense_function():
  """dense -> MoE (4 experts, top-2, copies), exported as Mixtral: transformers
  gives the dense Llama's logits, and so does our import of it."""
  _, dense = fixtures.reference('export_dense')
  tokens, moe = fixtures.reference('export_mixtral_upcycled')
  assert np.max(np.abs(moe - dense)) < 1e-5
  config, params, _, _, arch = importer.convert(fixtures.path('export_mixtral_upcycled'),
                                                fixtures.base_config())
  assert arch == 'mixtral' and config.moe.num_experts == 4
  assert np.max(np.abs(fixtures.logits(config, params, tokens) - dense)) < 1e-4


def test_finegrained_shared_export_as_qwen2_moe_keeps_the_dense_function():
  """dense (Qwen2-style) -> finegrained (2 copies x granularity 2, top-2 of 4,
  a gated shared expert), exported as Qwen2-MoE: transformers gives our dense
  model's logits, and our import of it is the shared-expert MoE it was."""
  ref = np.load(fixtures.path('export_qwen2_moe_upcycled') + '/reference.npz')
  assert np.max(np.abs(ref['logits'] - ref['dense_logits'])) < 1e-5
  assert np.std(ref['dense_logits']) > 0.5
  config, params, _, _, arch = importer.convert(fixtures.path('export_qwen2_moe_upcycled'),
                                                fixtures.base_config())
  m = config.moe
  assert arch == 'qwen2_moe' and (m.num_experts, m.top_k, m.d_ff) == (4, 2, 6)
  assert m.num_shared_experts == 2 and m.shared_gate and config.model.qkv_bias
  got = fixtures.logits(config, params, ref['tokens'])
  assert np.max(np.abs(got - ref['dense_logits'])) < 1e-4
