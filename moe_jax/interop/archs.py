"""transformers architectures <-> our `model` and `moe` config groups.

  arch, model, moe = archs.from_hf(hf_config)       # config.json -> group dicts
  arch = archs.pick(config, 'auto')                  # the export target, or one-line refusal
  hf_config = archs.to_hf(config, arch, token_ids)  # our config -> config.json

Every supported architecture is our decoder with some switches: Llama (and
SmolLM2) is the plain one, Qwen2 adds q/k/v biases, Qwen3 the per-head q/k
RMSNorm, Mixtral makes every layer MoE with Mixtral's router (softmax over
the top-k logits), Qwen3-MoE makes any set of layers MoE with softmax,
top-k and optional renormalisation (`norm_topk_prob`), Qwen2-MoE adds to
that q/k/v biases (its `qkv_bias`, true unless said) and a shared expert
whose output is gated by sigmoid(x . w): ours with moe.shared_gate, its width
moe.num_shared_experts x moe.d_ff. Anything these cannot say (shared experts
outside Qwen2-MoE or without the gate, sigmoid scores, a selection bias, a
hash router, a layer pattern Mixtral has no word for) is refused by name,
never approximated.
"""
import dataclasses
from typing import Optional

from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config


@dataclasses.dataclass(frozen=True)
class Arch:
  name: str           # --arch of the exporter, and model_type in config.json
  hf_class: str
  qk_norm: bool
  qkv_bias: Optional[bool]   # None: either, said by config.json's `qkv_bias`
  moe: bool


ARCHS = {a.name: a for a in (
    Arch('llama', 'LlamaForCausalLM', qk_norm=False, qkv_bias=False, moe=False),
    Arch('qwen2', 'Qwen2ForCausalLM', qk_norm=False, qkv_bias=True, moe=False),
    Arch('qwen3', 'Qwen3ForCausalLM', qk_norm=True, qkv_bias=False, moe=False),
    Arch('mixtral', 'MixtralForCausalLM', qk_norm=False, qkv_bias=False, moe=True),
    Arch('qwen3_moe', 'Qwen3MoeForCausalLM', qk_norm=True, qkv_bias=False, moe=True),
    Arch('qwen2_moe', 'Qwen2MoeForCausalLM', qk_norm=False, qkv_bias=None, moe=True),
)}
_BY_CLASS = {a.hf_class: a for a in ARCHS.values()}


def _need(hf, key):
  if hf.get(key) is None:
    raise ConfigError(f'config.json lacks {key!r}')
  return _count(hf, key)


def _count(hf, key):
  """hf[key] as a positive integer (None when absent); anything else, a
  string or a float included, is a one-line error naming the key."""
  value = hf.get(key)
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise ConfigError(f'config.json: {key}={value!r} must be a positive integer')
  return value


def _refuse(what, arch):
  raise ConfigError(f'{what} has no moe_jax equivalent ({arch.hf_class})')


def _rope(hf, arch):
  """RoPE keys from transformers 5's `rope_parameters` or the older
  `rope_theta` + `rope_scaling`."""
  params = {**(hf.get('rope_scaling') or {}), **(hf.get('rope_parameters') or {})}
  kind = params.get('rope_type') or params.get('type') or 'default'
  if params.get('partial_rotary_factor', hf.get('partial_rotary_factor', 1.0)) != 1.0:
    _refuse('partial_rotary_factor < 1 (RoPE on part of each head)', arch)
  out = dict(rope_theta=float(params.get('rope_theta', hf.get('rope_theta', 10_000.0))))
  if kind == 'default':
    return dict(out, rope_scaling='none')
  if kind != 'llama3':
    _refuse(f'rope type {kind!r} (supported: default, llama3)', arch)
  return dict(out, rope_scaling='llama3', rope_factor=float(params['factor']),
              rope_low_freq_factor=float(params['low_freq_factor']),
              rope_high_freq_factor=float(params['high_freq_factor']),
              rope_original_max_len=int(params.get('original_max_position_embeddings')
                                        or hf['max_position_embeddings']))


def _pattern(moe_layers, num_layers, arch):
  """(first_dense, every) whose layer pattern (ModelConfig.is_moe_layer) is `moe_layers`."""
  for first_dense in range(num_layers):
    for every in range(1, num_layers + 1):
      ours = {i for i in range(first_dense, num_layers) if (i - first_dense) % every == every - 1}
      if ours == moe_layers:
        return first_dense, every
  _refuse(f'MoE layers {sorted(moe_layers)} of {num_layers} (moe.every / moe.first_dense '
          'describe "every n-th after the first k")', arch)


def from_hf(hf):
  """(arch name, model group dict, moe group dict) of a transformers config.json."""
  try:
    return _from_hf(hf)
  except (TypeError, ValueError, KeyError, AttributeError) as e:
    if isinstance(e, ConfigError):
      raise
    raise ConfigError(f'config.json: a value of the wrong type or form ({type(e).__name__}: '
                      f'{e})') from None


def _from_hf(hf):
  classes = hf.get('architectures') or []
  if len(classes) != 1 or classes[0] not in _BY_CLASS:
    raise ConfigError(f'architecture {classes} is not supported; supported: '
                      f'{", ".join(sorted(_BY_CLASS))}')
  arch = _BY_CLASS[classes[0]]
  if hf.get('hidden_act', 'silu') != 'silu':
    _refuse(f'hidden_act={hf["hidden_act"]!r}', arch)
  if hf.get('attention_bias') or hf.get('mlp_bias'):
    _refuse('attention_bias / mlp_bias (biases on every projection)', arch)
  if hf.get('use_sliding_window') or (arch.name == 'mixtral' and hf.get('sliding_window')) or (
      any(t != 'full_attention' for t in hf.get('layer_types') or ())):
    _refuse('sliding-window attention', arch)
  d, heads = _need(hf, 'hidden_size'), _need(hf, 'num_attention_heads')
  model = dict(
      vocab_size=_need(hf, 'vocab_size'), d_model=d, num_layers=_need(hf, 'num_hidden_layers'),
      num_heads=heads, num_kv_heads=_count(hf, 'num_key_value_heads') or heads,
      head_dim=_count(hf, 'head_dim') or d // heads, d_ff=_need(hf, 'intermediate_size'),
      norm_eps=float(hf.get('rms_norm_eps', 1e-6)), qk_norm=arch.qk_norm,
      qkv_bias=(bool(hf.get('qkv_bias', True)) if arch.qkv_bias is None else arch.qkv_bias),
      tie_embeddings=bool(hf.get('tie_word_embeddings', False)),
      max_position_embeddings=int(hf.get('max_position_embeddings') or 0),
      init_std=float(hf.get('initializer_range', 0.02)), dtype='float32', **_rope(hf, arch))
  if not arch.moe:
    return arch.name, model, dict(num_experts=0)
  experts = _count(hf, 'num_local_experts') or _need(hf, 'num_experts')
  moe = dict(num_experts=experts, top_k=_need(hf, 'num_experts_per_tok'), router='learned',
             score='softmax', num_shared_experts=0, use_bias=False,
             balance_loss_weight=float(hf.get('router_aux_loss_coef', 0.0)))
  n = model['num_layers']
  if arch.name == 'mixtral':
    moe.update(d_ff=model['d_ff'], order='topk_then_softmax', renormalize=True, every=1,
               first_dense=0, jitter=float(hf.get('router_jitter_noise') or 0.0))
  else:
    step, dense = hf.get('decoder_sparse_step') or 1, set(hf.get('mlp_only_layers') or ())
    moe_layers = {i for i in range(n) if i not in dense and (i + 1) % step == 0}
    first_dense, every = _pattern(moe_layers, n, arch)
    moe.update(d_ff=_need(hf, 'moe_intermediate_size'), order='softmax_then_topk',
               renormalize=bool(hf.get('norm_topk_prob', False)), every=every,
               first_dense=first_dense)
  if arch.name == 'qwen2_moe':
    width = _need(hf, 'shared_expert_intermediate_size')
    if width % moe['d_ff']:
      _refuse(f'shared_expert_intermediate_size={width}, not a multiple of '
              f'moe_intermediate_size={moe["d_ff"]} (moe.num_shared_experts x moe.d_ff)', arch)
    moe.update(num_shared_experts=width // moe['d_ff'], shared_gate=True)
  return arch.name, model, moe


def pick(config, name='auto'):
  """The Arch to export `config` as: `name`, or with 'auto' the one its
  features ask for. A feature the arch cannot hold is a ConfigError naming it."""
  cfg = model_config.from_config(config, vocab_size=1)
  m = cfg.moe
  if name == 'auto':
    if m.num_experts:
      name = ('qwen2_moe' if m.num_shared_experts else 'qwen3_moe' if cfg.qk_norm
              else 'mixtral')
    else:
      name = 'qwen3' if cfg.qk_norm else 'qwen2' if cfg.qkv_bias else 'llama'
  if name not in ARCHS:
    raise ConfigError(f'--arch={name!r} is not one of auto, {", ".join(ARCHS)}')
  arch = ARCHS[name]
  refusals = [
      (arch.moe and not m.num_experts, 'a dense model (moe.num_experts=0)'),
      (not arch.moe and m.num_experts, f'MoE layers (moe.num_experts={m.num_experts})'),
      (cfg.qk_norm != arch.qk_norm, f'model.qk_norm={cfg.qk_norm}'),
      (arch.qkv_bias is not None and cfg.qkv_bias != arch.qkv_bias,
       f'model.qkv_bias={cfg.qkv_bias}'),
      (cfg.norm_position != 'pre', f'model.norm_position={cfg.norm_position!r}'),
  ]
  if m.num_experts:
    mixtral_gates = m.order == 'topk_then_softmax' or m.renormalize
    refusals += [
        (m.router != 'learned', f'moe.router={m.router!r}'),
        (m.score != 'softmax', f'moe.score={m.score!r}'),
        (m.use_bias, 'moe.use_bias (a selection bias, aux-loss-free balancing)'),
        (name != 'qwen2_moe' and m.num_shared_experts > 0,
         f'moe.num_shared_experts={m.num_shared_experts}'),
        (name == 'qwen2_moe' and not m.num_shared_experts,
         'no shared expert (moe.num_shared_experts=0; Qwen2-MoE always has one)'),
        (name == 'qwen2_moe' and m.num_shared_experts and not m.shared_gate,
         'an ungated shared expert (moe.shared_gate=False; Qwen2-MoE gates it by '
         'sigmoid(x . w))'),
        (name == 'mixtral' and len(cfg.moe_layers) < cfg.num_layers,
         f'dense layers between MoE layers (moe.every={m.every}, moe.first_dense={m.first_dense})'),
        (name == 'mixtral' and not mixtral_gates,
         'moe.renormalize=False (Mixtral renormalises the top-k gates)'),
    ]
  for refused, what in refusals:
    if refused:
      raise ConfigError(f'{what} has no equivalent in {arch.hf_class} (--arch={name})')
  return arch


def to_hf(config, arch, bos_id=None, eos_id=None, pad_id=None):
  """config.json for `arch` (from pick) of the model in `config`."""
  cfg = model_config.from_config(config)
  m = cfg.moe
  rope = dict(rope_type='default', rope_theta=cfg.rope_theta)
  if cfg.rope_scaling == 'llama3':
    rope = dict(rope, rope_type='llama3', factor=cfg.rope_factor,
                low_freq_factor=cfg.rope_low_freq_factor,
                high_freq_factor=cfg.rope_high_freq_factor,
                original_max_position_embeddings=cfg.rope_original_max_len)
  max_len = cfg.max_position_embeddings or config.seq_len
  if cfg.rope_scaling == 'llama3':
    max_len = max(max_len, cfg.rope_original_max_len)
  hf = dict(
      architectures=[arch.hf_class], model_type=arch.name, vocab_size=cfg.vocab_size,
      hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, num_hidden_layers=cfg.num_layers,
      num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
      head_dim=cfg.head_dim, hidden_act='silu', rms_norm_eps=cfg.norm_eps,
      max_position_embeddings=max_len, tie_word_embeddings=cfg.tie_embeddings,
      initializer_range=cfg.init_std, dtype='float32', torch_dtype='float32',
      bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id,
      # transformers 5 reads rope_parameters; 4.x and vLLM read the two older keys.
      rope_parameters=rope, rope_theta=cfg.rope_theta,
      rope_scaling=None if cfg.rope_scaling == 'none' else rope,
      attention_bias=False, attention_dropout=0.0, use_cache=True)
  if arch.name in ('llama', 'mixtral'):
    hf['mlp_bias'] = False
  if arch.name == 'qwen2':
    del hf['attention_bias']   # Qwen2 always has q/k/v biases and no key for them
  if arch.name != 'llama':
    hf.update(sliding_window=None, use_sliding_window=False)
  if arch.name == 'mixtral':
    hf.update(intermediate_size=m.d_ff, num_local_experts=m.num_experts,
              num_experts_per_tok=m.top_k, router_aux_loss_coef=m.balance_loss_weight,
              router_jitter_noise=m.jitter, output_router_logits=False)
  if arch.name == 'qwen2_moe':
    hf.update(qkv_bias=cfg.qkv_bias, shared_expert_intermediate_size=m.num_shared_experts * m.d_ff)
  if arch.name in ('qwen3_moe', 'qwen2_moe'):
    dense = [i for i in range(cfg.num_layers) if not cfg.is_moe_layer(i)]
    hf.update(num_experts=m.num_experts, num_experts_per_tok=m.top_k,
              moe_intermediate_size=m.d_ff, decoder_sparse_step=1, mlp_only_layers=dense,
              norm_topk_prob=m.order == 'topk_then_softmax' or m.renormalize,
              router_aux_loss_coef=m.balance_loss_weight, output_router_logits=False)
  return hf
