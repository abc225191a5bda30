"""GGUF import: tiny llama files written as llama.cpp writes them (gguf_files.py)."""
import json
import os

import gguf
import jax
import numpy as np
import pytest

from moe_jax.data import corpus
from moe_jax.data.tokenizer import BpeTokenizer
from moe_jax.errors import ConfigError
from moe_jax.interop import importer, safetensors_io
from tests.interop import fixtures, gguf_files

Q = gguf.GGMLQuantizationType


def _specials():
  with open(os.path.join(fixtures.HERE, 'tokenizer', 'tokenizer_config.json')) as f:
    return json.load(f)


def _write(path, hf_config, tensors, **kw):
  gguf_files.write(str(path), hf_config, tensors, fixtures.TOKENIZER, _specials(), **kw)
  return str(path)


def test_gguf_import_equals_the_checkpoint(tmp_path):
  name = 'llama_gqa_sharded'
  hf_config, tensors = safetensors_io.read_dir(fixtures.path(name))
  path = _write(tmp_path / 'tiny.gguf', hf_config, tensors)
  want_config, want, _, _, _ = importer.convert(fixtures.path(name), fixtures.base_config())
  got_config, got, tok, specials, arch = importer.convert(path, fixtures.base_config())
  assert arch == 'llama'
  assert got_config.model.to_dict() == want_config.model.to_dict()
  jax.tree.map(np.testing.assert_array_equal, got, want)
  tokens, logits = fixtures.reference(name)
  assert np.max(np.abs(fixtures.logits(got_config, got, tokens) - logits)) < 1e-4

  # The tokenizer rebuilt from the metadata encodes as the original tokenizer.json.
  original = BpeTokenizer.load(fixtures.TOKENIZER)
  rebuilt = BpeTokenizer(tok, specials=specials)
  text = corpus.shakespeare()[-1].text[:20_000] + ' In 1603, 42 apples.\n\t x'
  np.testing.assert_array_equal(rebuilt.encode(text), original.encode(text))
  assert rebuilt.decode(rebuilt.encode(text)) == text
  assert (rebuilt.bos_id, rebuilt.eos_id, rebuilt.pad_id) == (
      original.bos_id, original.eos_id, original.pad_id)
  assert specials['chat_template'] == _specials()['chat_template']


@pytest.mark.parametrize('qtype', [Q.Q8_0, Q.Q4_1], ids=lambda q: q.name)
def test_quantized_tensors_are_dequantized(tmp_path, qtype):
  """2-D weights in `qtype` (blocks of 32 along the input dim) come back within
  the quantization step, through the same names and q/k permutation."""
  rng = np.random.default_rng(0)
  d, f, h, g, k, v = 64, 96, 4, 2, 16, 280
  hf_config = dict(num_hidden_layers=1, max_position_embeddings=64, hidden_size=d,
                   intermediate_size=f, num_attention_heads=h, num_key_value_heads=g,
                   head_dim=k, rope_parameters=dict(rope_theta=1e4), rms_norm_eps=1e-5,
                   vocab_size=v)
  shapes = {'model.embed_tokens.weight': (v, d), 'model.norm.weight': (d,),
            'lm_head.weight': (v, d), 'model.layers.0.input_layernorm.weight': (d,),
            'model.layers.0.post_attention_layernorm.weight': (d,),
            'model.layers.0.self_attn.q_proj.weight': (h * k, d),
            'model.layers.0.self_attn.k_proj.weight': (g * k, d),
            'model.layers.0.self_attn.v_proj.weight': (g * k, d),
            'model.layers.0.self_attn.o_proj.weight': (d, h * k),
            'model.layers.0.mlp.gate_proj.weight': (f, d),
            'model.layers.0.mlp.up_proj.weight': (f, d),
            'model.layers.0.mlp.down_proj.weight': (d, f)}
  tensors = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
  path = _write(tmp_path / 'q.gguf', hf_config, tensors, qtype=qtype)
  _, got_tensors, _, _ = importer.read(path)
  assert sorted(got_tensors) == sorted(tensors)
  for name, w in tensors.items():
    got = got_tensors[name]
    if w.ndim == 1:
      np.testing.assert_array_equal(got, w)
      continue
    # Blocks of 32 along the input dim; a block's scale (and Q4_1's minimum) is
    # float16, rounded by up to 2^-11 relative, and q goes up to 127 (15 for Q4_1).
    blocks = w.reshape(w.shape[0], -1, 32)
    if qtype == Q.Q4_1:
      step = (blocks.max(-1) - blocks.min(-1)) / 15
      bound = step * (0.5 + 15 * 2**-11) + np.abs(blocks.min(-1)) * 2**-11
    else:
      step = np.abs(blocks).max(-1) / 127
      bound = step * (0.5 + 127 * 2**-11)
    err = np.abs(got - w).reshape(blocks.shape)
    assert np.all(err <= bound[..., None] + 1e-7), name
    assert np.any(err > 0), name   # really quantized


def test_unsupported_tokenizer_is_refused(tmp_path):
  hf_config, tensors = safetensors_io.read_dir(fixtures.path('llama_gqa_sharded'))
  path = _write(tmp_path / 'llama3.gguf', hf_config, tensors, pre='llama-bpe')
  with pytest.raises(ConfigError, match="tokenizer.ggml.pre='llama-bpe' is not supported"):
    importer.read(path)


def _bare(path, arch, tensor, **raw):
  writer = gguf.GGUFWriter(str(path), arch)
  writer.add_block_count(1)
  writer.add_embedding_length(8)
  writer.add_head_count(2)
  writer.add_tensor('output_norm.weight', tensor, **raw)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return str(path)


def test_unsupported_architecture_and_types_are_refused(tmp_path):
  path = _bare(tmp_path / 'gpt2.gguf', 'gpt2', np.ones(8, np.float32))
  with pytest.raises(ConfigError, match="general.architecture='gpt2' is not supported"):
    importer.read(path)
  path = _bare(tmp_path / 'int8.gguf', 'llama', np.ones(8, np.int8), raw_dtype=Q.I8)
  with pytest.raises(ConfigError, match='output_norm.weight is I8'):
    importer.read(path)
