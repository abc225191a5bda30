"""One to one between our param paths and transformers tensor names.

  tensors = layout.to_hf(arch, params)                 # {hf name: array}
  params = layout.from_hf(arch, tensors, abstract)     # our nested dict, float32

Each of our params is one transformers tensor (an expert stack is E of
them), reshaped, and transposed where transformers keeps a Linear as
[out, in] and we keep [in..., out...]: q [D, H, K] is q_proj.weight
[H*K, D] transposed; o [H, K, D] is o_proj.weight [D, H*K] transposed;
q_bias [H, K] is q_proj.bias [H*K]; norms and the embedding are as they are.
`from_hf` walks our abstract params, so a tensor the file lacks, one it has
extra, or one whose shape disagrees with the config is a one-line error.
"""
import re

import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.upcycle import paths

_TOP = {'embed/embedding': 'model.embed_tokens.weight', 'final_norm/scale': 'model.norm.weight',
        'lm_head': 'lm_head.weight'}
_LAYER = {
    'attn_norm/scale': 'input_layernorm.weight',
    'mlp_norm/scale': 'post_attention_layernorm.weight',
    **{f'attn/{p}': f'self_attn.{p}_proj.weight' for p in 'qkvo'},
    **{f'attn/{p}_bias': f'self_attn.{p}_proj.bias' for p in 'qkv'},
    **{f'attn/{p}_norm/scale': f'self_attn.{p}_norm.weight' for p in 'qk'},
    'mlp/wi_0': 'mlp.gate_proj.weight', 'mlp/wi_1': 'mlp.up_proj.weight',
    'mlp/wo': 'mlp.down_proj.weight',
}
# arch -> (the MoE block's name, our expert param -> its per-expert Linear).
_QWEN = dict(wi_0='gate_proj', wi_1='up_proj', wo='down_proj')
_MOE = {'mixtral': ('block_sparse_moe', dict(wi_0='w1', wi_1='w3', wo='w2')),
        'qwen3_moe': ('mlp', _QWEN), 'qwen2_moe': ('mlp', _QWEN)}
# Qwen2-MoE's shared expert and its gate (moe.num_shared_experts, moe.shared_gate).
_SHARED = {**{f'moe/shared/{p}': f'mlp.shared_expert.{q}.weight' for p, q in _QWEN.items()},
           'moe/shared_gate': 'mlp.shared_expert_gate.weight'}
# Tensors a checkpoint may carry that are not weights.
_IGNORED = re.compile(r'.*rotary_emb\.inv_freq')


def hf_names(arch, path, num_experts=0):
  """The transformers names of param `path`: one, or one per expert."""
  if path in _TOP:
    return [_TOP[path]]
  layer, rest = re.fullmatch(r'layers_(\d+)/(.*)', path).groups()
  prefix = f'model.layers.{layer}.'
  if rest in _LAYER:
    return [prefix + _LAYER[rest]]
  block, linears = _MOE.get(arch, (None, {}))
  if rest == 'moe/router/w' and block:
    return [f'{prefix}{block}.gate.weight']
  if rest in _SHARED and arch == 'qwen2_moe':
    return [prefix + _SHARED[rest]]
  expert = re.fullmatch(r'moe/experts/(wi_0|wi_1|wo)', rest)
  if expert and block:
    return [f'{prefix}{block}.experts.{e}.{linears[expert[1]]}.weight'
            for e in range(num_experts)]
  raise ConfigError(f'param {path} has no {arch} tensor')


def _in_dims(path):
  """How many leading dims of a Linear param are its input (o: heads and head_dim)."""
  return 2 if path.endswith('attn/o') else 1


def _is_linear(path):
  return not (path.endswith('scale') or path.endswith('_bias') or path == 'embed/embedding')


def hf_shape(path, shape):
  """The transformers shape of one param (one expert's slice for experts)."""
  if not _is_linear(path):
    return (int(np.prod(shape)),) if path.endswith('_bias') else tuple(shape)
  n = _in_dims(path)
  return (int(np.prod(shape[n:])), int(np.prod(shape[:n])))


def _to_hf(path, w):
  if not _is_linear(path):
    return np.asarray(w).reshape(hf_shape(path, w.shape))
  n = _in_dims(path)
  return np.asarray(w).reshape(int(np.prod(w.shape[:n])), -1).T


def _from_hf(path, w, shape):
  w = np.asarray(w, np.float32)
  return (w.T if _is_linear(path) else w).reshape(shape)


def to_hf(arch, params):
  """{transformers name: float32 array} of `params` (a nested dict of arrays)."""
  out = {}
  for path, w in paths.flatten(params).items():
    w = np.asarray(w, np.float32)
    names = hf_names(arch, path, w.shape[0] if '/experts/' in path else 0)
    slices = list(w) if '/experts/' in path else [w]
    for name, piece in zip(names, slices):
      out[name] = np.ascontiguousarray(_to_hf(path, piece))
  return out


def from_hf(arch, tensors, abstract_params, tied=False):
  """Our params (nested dict of float32 numpy arrays) from transformers tensors.

  `abstract_params` (ShapeDtypeStructs of the model the config describes)
  fixes the paths and shapes. With `tied`, a stored lm_head.weight must equal
  the embedding (some checkpoints keep both).
  """
  abstract, want = paths.flatten(abstract_params), {}
  for path, leaf in abstract.items():
    experts = '/experts/' in path
    names = hf_names(arch, path, leaf.shape[0] if experts else 0)
    for name in names:
      want[name] = (path, hf_shape(path, leaf.shape[1:] if experts else leaf.shape))
  have = {n for n in tensors if not _IGNORED.fullmatch(n)}
  if tied and 'lm_head.weight' in have:
    if not np.array_equal(tensors['lm_head.weight'], tensors.get('model.embed_tokens.weight')):
      raise ConfigError('tie_word_embeddings is set but lm_head.weight differs from '
                        'model.embed_tokens.weight')
    have.discard('lm_head.weight')
  missing, extra = sorted(set(want) - have), sorted(have - set(want))
  if missing or extra:
    raise ConfigError(f'the tensors do not match a {arch} model of this config: ' + '; '.join(
        filter(None, [missing and f'missing {paths.summary(missing, 3)}',
                      extra and f'unexpected {paths.summary(extra, 3)}'])))
  for name, (path, shape) in want.items():
    if tuple(tensors[name].shape) != shape:
      raise ConfigError(f'tensor {name} has shape {tuple(tensors[name].shape)}; the config '
                        f'implies {shape} (param {path})')
  flat = {}
  for path, leaf in abstract.items():
    if '/experts/' in path:
      names = hf_names(arch, path, leaf.shape[0])
      flat[path] = np.stack([_from_hf(path, tensors[n], leaf.shape[1:]) for n in names])
    else:
      flat[path] = _from_hf(path, tensors[hf_names(arch, path)[0]], leaf.shape)
  return paths.unflatten(flat)
