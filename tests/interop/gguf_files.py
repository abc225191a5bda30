"""Writing llama GGUF files the way llama.cpp's convert_hf_to_gguf.py does, for tests.

The q/k row permutation, the tensor names and the tokenizer metadata are
written here from llama.cpp's conventions, independently of
moe_jax/interop/gguf_io.py, which has to undo them.
"""
import json

import gguf
import numpy as np

_BLOCK = {'input_layernorm': 'attn_norm', 'post_attention_layernorm': 'ffn_norm',
          'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k', 'self_attn.v_proj': 'attn_v',
          'self_attn.o_proj': 'attn_output', 'mlp.gate_proj': 'ffn_gate', 'mlp.up_proj': 'ffn_up',
          'mlp.down_proj': 'ffn_down'}
_TOP = {'model.embed_tokens.weight': 'token_embd.weight', 'model.norm.weight': 'output_norm.weight',
        'lm_head.weight': 'output.weight'}


def permute(w, heads):
  """llama.cpp's `permute`: each head's rows from [half 1, half 2] to interleaved pairs."""
  return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(name):
  if name in _TOP:
    return _TOP[name]
  layer, rest = name[len('model.layers.'):].split('.', 1)
  return f'blk.{layer}.{_BLOCK[rest.rsplit(".", 1)[0]]}.weight'


def tokenizer_metadata(writer, tokenizer_json, specials, pre='smollm'):
  with open(tokenizer_json) as f:
    tok = json.load(f)
  vocab = dict(tok['model']['vocab'])
  vocab.update({t['content']: t['id'] for t in tok['added_tokens']})
  tokens = [None] * len(vocab)
  for token, i in vocab.items():
    tokens[i] = token
  control = {t['id'] for t in tok['added_tokens'] if t['special']}
  writer.add_tokenizer_model('gpt2')
  writer.add_tokenizer_pre(pre)
  writer.add_token_list(tokens)
  writer.add_token_types([3 if i in control else 1 for i in range(len(tokens))])
  writer.add_token_merges([' '.join(m) if isinstance(m, list) else m
                           for m in tok['model']['merges']])
  writer.add_bos_token_id(vocab[specials['bos_token']])
  writer.add_eos_token_id(vocab[specials['eos_token']])
  writer.add_pad_token_id(vocab[specials['pad_token']])
  writer.add_add_bos_token(specials['add_bos_token'])
  writer.add_chat_template(specials['chat_template'])


def write(path, hf_config, tensors, tokenizer_json, specials, qtype=gguf.GGMLQuantizationType.F32,
          pre='smollm'):
  """A llama GGUF of a transformers checkpoint; 2-D weights in `qtype`."""
  c = hf_config
  writer = gguf.GGUFWriter(path, 'llama')
  writer.add_block_count(c['num_hidden_layers'])
  writer.add_context_length(c['max_position_embeddings'])
  writer.add_embedding_length(c['hidden_size'])
  writer.add_feed_forward_length(c['intermediate_size'])
  writer.add_head_count(c['num_attention_heads'])
  writer.add_head_count_kv(c['num_key_value_heads'])
  writer.add_rope_freq_base(c['rope_parameters']['rope_theta'])
  writer.add_layer_norm_rms_eps(c['rms_norm_eps'])
  writer.add_key_length(c['head_dim'])
  writer.add_value_length(c['head_dim'])
  writer.add_rope_dimension_count(c['head_dim'])
  writer.add_vocab_size(c['vocab_size'])
  tokenizer_metadata(writer, tokenizer_json, specials, pre)
  for name, w in tensors.items():
    w = np.asarray(w, np.float32)
    if name.endswith('q_proj.weight'):
      w = permute(w, c['num_attention_heads'])
    elif name.endswith('k_proj.weight'):
      w = permute(w, c['num_key_value_heads'])
    if w.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32:
      writer.add_tensor(gguf_name(name), gguf.quants.quantize(w, qtype), raw_dtype=qtype)
    else:
      writer.add_tensor(gguf_name(name), w)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
