"""llama-architecture GGUF files (llama.cpp) read as a transformers checkpoint.

  hf_config, tensors, tokenizer, specials = gguf_io.read(path)

Quantized tensors are dequantized to float32 with the `gguf` package (every
type it implements: Q4_0 ... Q8_0, the K-quants, the IQ types). llama.cpp
stores the rows of q and k permuted for its rotate-adjacent-pairs RoPE
(`permute` in its convert_hf_to_gguf.py); `unpermute` undoes that, so
q_proj and k_proj come out as in the transformers checkpoint the file was
converted from and our rotate-halves RoPE applies unchanged. The tokenizer
is rebuilt from the file's vocabulary and merges (moe_jax/interop/tokens.py).
"""
import re
import struct

import gguf
import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.interop import tokens

_NAMES = {
    'token_embd.weight': 'model.embed_tokens.weight',
    'output_norm.weight': 'model.norm.weight',
    'output.weight': 'lm_head.weight',
}
_BLOCK = {
    'attn_norm': 'input_layernorm', 'ffn_norm': 'post_attention_layernorm',
    'attn_q': 'self_attn.q_proj', 'attn_k': 'self_attn.k_proj', 'attn_v': 'self_attn.v_proj',
    'attn_output': 'self_attn.o_proj', 'ffn_gate': 'mlp.gate_proj', 'ffn_up': 'mlp.up_proj',
    'ffn_down': 'mlp.down_proj',
}


def unpermute(w, heads):
  """Inverse of llama.cpp's q/k row permutation over `heads` heads."""
  half = w.shape[0] // heads // 2
  return w.reshape(heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def metadata(reader):
  out = {}
  for key, field in reader.fields.items():
    if key.startswith('GGUF.'):
      continue
    try:
      out[key] = field.contents()
    except (ValueError, IndexError, TypeError):  # fields gguf cannot decode are not ours
      continue
  return out


def _hf_name(name):
  if name in _NAMES:
    return _NAMES[name]
  m = re.fullmatch(r'blk\.(\d+)\.(\w+)\.weight', name)
  if m and m[2] in _BLOCK:
    return f'model.layers.{m[1]}.{_BLOCK[m[2]]}.weight'
  raise ConfigError(f'GGUF tensor {name} has no place in a llama model'
                    + (' (rope_freqs: Llama 3.1 RoPE scaling is not read from GGUF)'
                       if name.startswith('rope_freqs') else ''))


def dequantize(tensor):
  """float32 array of a GGUF tensor, in numpy (transformers) dim order."""
  qtype = gguf.GGMLQuantizationType(tensor.tensor_type)
  shape = tuple(int(n) for n in reversed(tensor.shape))
  try:
    w = gguf.quants.dequantize(np.asarray(tensor.data), qtype)
  except NotImplementedError as e:
    raise ConfigError(f'GGUF tensor {tensor.name} is {qtype.name}, a type the gguf package '
                      'cannot dequantize') from e
  return np.asarray(w, np.float32).reshape(shape)


def _shortest(x):
  """A float32 from the file as the shortest decimal that rounds to it (1e-6, not
  9.99999997e-07): the number the converter was given."""
  return float(str(np.float32(x)))


def _config(meta, names):
  arch = meta.get('general.architecture')
  if arch != 'llama':
    raise ConfigError(f'GGUF general.architecture={arch!r} is not supported; supported: llama')
  if meta.get('llama.expert_count'):
    raise ConfigError(f'GGUF llama.expert_count={meta["llama.expert_count"]}: MoE GGUF files '
                      'are not read (import the transformers checkpoint)')
  scaling = meta.get('llama.rope.scaling.type', 'none')
  if scaling != 'none':
    raise ConfigError(f'GGUF llama.rope.scaling.type={scaling!r} has no moe_jax equivalent')
  get = lambda key, default=None: meta.get(f'llama.{key}', default)
  d, heads = get('embedding_length'), get('attention.head_count')
  if d is None or heads is None or get('block_count') is None:
    raise ConfigError('GGUF file lacks llama.embedding_length / attention.head_count / '
                      'block_count')
  head_dim = get('attention.key_length') or d // heads
  if get('rope.dimension_count', head_dim) != head_dim:
    raise ConfigError(f'GGUF llama.rope.dimension_count={get("rope.dimension_count")} is not '
                      f'the head size {head_dim} (partial RoPE has no moe_jax equivalent)')
  return dict(
      architectures=['LlamaForCausalLM'], model_type='llama', hidden_act='silu',
      vocab_size=get('vocab_size') or len(meta.get('tokenizer.ggml.tokens', ())),
      hidden_size=d, intermediate_size=get('feed_forward_length'),
      num_hidden_layers=get('block_count'), num_attention_heads=heads,
      num_key_value_heads=get('attention.head_count_kv') or heads, head_dim=head_dim,
      rms_norm_eps=_shortest(get('attention.layer_norm_rms_epsilon', 1e-5)),
      rope_theta=_shortest(get('rope.freq_base', 10_000.0)),
      max_position_embeddings=get('context_length', 0),
      tie_word_embeddings='output.weight' not in names)


def read(path):
  """(transformers config dict, {hf name: float32 array}, tokenizers.Tokenizer,
  tokenizer_config dict) of the GGUF file at `path`."""
  try:
    reader = gguf.GGUFReader(path)
  except (ValueError, OSError, IndexError, KeyError, TypeError, OverflowError, MemoryError,
          struct.error) as e:   # the reader trusts the header: a cut file or a huge count
    raise ConfigError(f'{path} is not a readable GGUF file (truncated or corrupt: '
                      f'{type(e).__name__}: {e})') from None
  meta = metadata(reader)
  hf = _config(meta, {t.name for t in reader.tensors})
  tensors = {}
  for t in reader.tensors:
    name = _hf_name(t.name)
    w = dequantize(t)
    if name.endswith('q_proj.weight'):
      w = unpermute(w, hf['num_attention_heads'])
    elif name.endswith('k_proj.weight'):
      w = unpermute(w, hf['num_key_value_heads'])
    tensors[name] = w
  tokenizer, specials = tokens.from_gguf(meta)
  return hf, tensors, tokenizer, specials
