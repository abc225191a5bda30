"""The frozen model config (schema/model.py) from a config's `model` and `moe`
groups, checked once.

`from_config(config)` copies the two groups into the schema's hashable
dataclasses, resolves the "0 means default" keys, and raises a one-line
ConfigError naming the key for anything the model cannot build: a value past
its field's bounds (schema/field.py), a choice a registry of models/ owns,
and the rules between keys.
"""
import dataclasses
import math

from moe_jax.errors import ConfigError
from moe_jax.schema import field
from moe_jax.schema.model import ModelConfig, MoEConfig


def from_config(config, vocab_size=None):
  """A validated ModelConfig from a ConfigDict with `model` and `moe` groups.

  `vocab_size` fills in `model.vocab_size == 0` (take the tokenizer's size).
  """
  model_kw = _group_kwargs(config.model, ModelConfig, 'model', skip=('moe',))
  moe_kw = _group_kwargs(config.moe, MoEConfig, 'moe')
  if model_kw['vocab_size'] == 0 and vocab_size is not None:
    model_kw['vocab_size'] = int(vocab_size)
  if moe_kw['d_ff'] == 0:
    moe_kw['d_ff'] = model_kw['d_ff']
  if moe_kw['router_init_std'] == 0.0 and model_kw['d_model'] > 0:
    # Seed 002 appendix A.6: router weights ~ N(0, 2 / (5 d_model)).
    moe_kw['router_init_std'] = math.sqrt(2.0 / (5.0 * model_kw['d_model']))
  cfg = ModelConfig(moe=MoEConfig(**moe_kw), **model_kw)
  validate(cfg)
  return cfg


def validate(cfg):
  """Raises ConfigError (one line, naming the key) for an unbuildable model."""
  # The registries import JAX; this module does not, so workdir/files.py and
  # `python -m moe_jax.lineage` stay fast.
  from moe_jax.kernels import attention_cudnn  # pylint: disable=g-import-not-at-top
  from moe_jax.models import dispatch, routers  # pylint: disable=g-import-not-at-top
  field.check('model', vars(cfg), ModelConfig)
  if cfg.vocab_size == 0:
    raise ConfigError('model.vocab_size=0 must be positive (or filled in from the tokenizer)')
  if cfg.num_heads % cfg.num_kv_heads:
    raise ConfigError(f'model.num_heads={cfg.num_heads} is not divisible by '
                      f'model.num_kv_heads={cfg.num_kv_heads}')
  if cfg.head_dim % 2:
    raise ConfigError(f'model.head_dim={cfg.head_dim} must be even (RoPE rotates pairs)')
  if cfg.attention == 'cudnn':
    attention_cudnn.check(cfg.dtype, cfg.head_dim)
  if cfg.rope_scaling == 'llama3' and not (
      cfg.rope_factor > 0 and 0 < cfg.rope_low_freq_factor < cfg.rope_high_freq_factor
      and cfg.rope_original_max_len > 0):
    raise ConfigError(
        f'model.rope_scaling=llama3 needs rope_factor > 0 (got {cfg.rope_factor}), 0 < '
        f'rope_low_freq_factor < rope_high_freq_factor (got {cfg.rope_low_freq_factor}, '
        f'{cfg.rope_high_freq_factor}) and rope_original_max_len > 0 '
        f'(got {cfg.rope_original_max_len})')
  m = cfg.moe
  if m.num_experts == 0:
    return
  field.check('moe', vars(m), MoEConfig)
  _check_choice('moe.router', m.router, routers.names())
  _check_choice('moe.dispatch', m.dispatch, dispatch.NAMES)
  if m.dispatch == 'pallas_mosaic_gpu' and cfg.dtype not in ('bfloat16', 'float16'):
    # Any d_model and d_ff: moe_ffn pads them to the kernels' tiles.
    raise ConfigError(
        "moe.dispatch='pallas_mosaic_gpu' needs model.dtype bfloat16 or float16 (wgmma's "
        f"16-bit operands), got {cfg.dtype}; use moe.dispatch='pallas'")
  if m.top_k > m.num_experts:
    raise ConfigError(f'moe.top_k={m.top_k} must be in [1, moe.num_experts={m.num_experts}]')
  if m.shared_gate and not m.num_shared_experts:
    raise ConfigError('moe.shared_gate=True gates the shared experts, but '
                      'moe.num_shared_experts=0')
  if not cfg.moe_layers:
    raise ConfigError(f'moe.every={m.every}, moe.first_dense={m.first_dense} leave no MoE '
                      f'layer in model.num_layers={cfg.num_layers}')
  if m.order == 'topk_then_softmax' and m.score != 'softmax':
    raise ConfigError(f"moe.order='topk_then_softmax' needs moe.score='softmax', "
                      f'got {m.score!r}')
  routers.get(m.router).check(m)


def _check_choice(key, value, choices):
  if value not in choices:
    raise ConfigError(f'{key}={value!r} is not one of {choices}')


def _group_kwargs(group, cls, name, skip=()):
  """The group as keyword arguments over the dataclass's defaults (a group
  built by hand may name only some keys); a key the dataclass lacks is an error."""
  fields = {f.name for f in dataclasses.fields(cls)} - set(skip)
  out = field.defaults(cls)
  for key, value in group.items():
    if key not in fields:
      raise ConfigError(f'{name}.{key} is not a known key (known: {sorted(fields)})')
    out[key] = value
  return out
