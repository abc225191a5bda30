"""Frozen model config: the `model` and `moe` config groups, checked once.

Model code never reads a ConfigDict: `ModelConfig.from_config(config)` copies
the two groups into hashable dataclasses (so a Linen module can hold them),
resolves the "0 means default" keys, and raises a one-line ConfigError naming
the key for anything the model cannot build.
"""
import dataclasses
import math

from moe_jax import config_group
from moe_jax.config_group import field
from moe_jax.errors import ConfigError

SCORES = ('softmax', 'sigmoid')
ORDERS = ('softmax_then_topk', 'topk_then_softmax')
BALANCE_SCOPES = ('global', 'sequence')
ROUTER_LOSS_REDUCTIONS = ('sum', 'mean')
ATTENTIONS = ('auto', 'reference', 'blocked', 'pallas', 'cudnn')
DTYPES = ('float32', 'bfloat16', 'float16')
ROPE_SCALINGS = ('none', 'llama3')
NORM_POSITIONS = ('pre', 'post')
CROSS_ENTROPIES = ('reference', 'fused')   # models/losses.py
REMATS = ('none', 'full', 'save_dots', 'save_dots_no_batch', 'save_moe')  # models/remat.py


@dataclasses.dataclass(frozen=True)
class MoEConfig:
  """The `moe` group; `d_ff` and `router_init_std` are already resolved.

  These defaults are the config's (configs/common.py builds the group from
  them); num_experts=0 makes every layer dense.
  """
  num_experts: int = 0
  top_k: int = 2
  d_ff: int = 0                  # per-expert width; 0: same as model.d_ff
  num_shared_experts: int = 0
  # sigmoid(x . w) times the shared experts' output, w [D, 1] (Qwen2-MoE's
  # shared_expert_gate); needs num_shared_experts > 0.
  shared_gate: bool = False
  # Layer pattern: layer i is MoE iff i >= first_dense and
  # (i - first_dense) % every == every - 1. every=1: all MoE; every=2: Llama-4 style.
  every: int = 1
  first_dense: int = 0
  router: str = 'learned'        # a router of moe_jax/models/routers/: learned | hash
  hash_seed: int = 0             # hash router: table = f(vocab_size, num_experts, hash_seed)
  score: str = 'softmax'         # softmax | sigmoid
  order: str = 'softmax_then_topk'  # softmax_then_topk | topk_then_softmax
  renormalize: bool = True       # renormalise the selected top-k gates to sum to 1
  router_init_std: float = 0.0   # 0: sqrt(2 / (5 d_model)), seed 002 appendix A.6
  jitter: float = 0.0            # multiplicative input jitter while training
  use_bias: bool = False         # selection-only bias, aux-loss-free balancing
  bias_update_rate: float = field(1e-3, at_least=0.0)
  balance_loss_weight: float = field(0.01, at_least=0.0)
  balance_scope: str = 'global'  # global | sequence
  z_loss_weight: float = field(1e-3, at_least=0.0)
  router_loss_reduction: str = 'sum'  # sum | mean of the router losses over MoE layers
  # auto (per platform) | reference | einsum | ragged | grouped | pallas |
  # pallas_mosaic_gpu (models/dispatch.py)
  dispatch: str = 'auto'
  capacity_factor: float = 1.25  # einsum dispatch only


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The `model` group plus its `moe` group. These defaults are the config's
  (configs/common.py builds the group from them): a CPU-sized Llama-style
  decoder, the `tiny` preset."""
  vocab_size: int = 0            # 0: take the tokenizer's vocabulary size
  d_model: int = 64
  num_layers: int = 2
  num_heads: int = 4
  num_kv_heads: int = 2
  head_dim: int = 16
  d_ff: int = 256                # dense MLP width
  rope_theta: float = 10_000.0
  # Llama 3's long-context RoPE rule (moe_jax/models/rope.py); 'none' leaves
  # the frequencies alone and the four keys below unused.
  rope_scaling: str = 'none'     # none | llama3
  rope_factor: float = 8.0
  rope_low_freq_factor: float = 1.0
  rope_high_freq_factor: float = 4.0
  rope_original_max_len: int = 8192
  max_position_embeddings: int = 0  # the context the model is meant for; only exported (0: seq_len)
  norm_eps: float = 1e-6
  qk_norm: bool = False          # RMSNorm over each head's q and k before RoPE (Qwen3)
  qkv_bias: bool = False         # biases on the q, k, v projections (Qwen2)
  norm_position: str = 'pre'     # pre: x + F(norm(x)) | post: norm(x + F(x)) (seed 003 App. C)
  tie_embeddings: bool = False
  dtype: str = 'float32'         # compute dtype; params stay float32
  init_std: float = 0.02
  # auto (per platform) | reference | blocked (kernels/attention_cpu.py) | pallas (attention_gpu.py)
  # | cudnn (attention_cudnn.py)
  attention: str = 'auto'
  # Memory (models/remat.py; docs/benchmarks.md, "Memory"): what each block
  # keeps for the backward pass, and tokens per chunk of the LM head + loss in
  # training (0: one [B, L, V]).
  remat: str = 'none'
  loss_chunk: int = 0
  # reference | fused: the per-token loss without float32 [tokens, V] passes
  # (models/losses.py); opt-in until a GPU has timed it against the reference.
  cross_entropy: str = 'reference'
  # The block stack as scans over its periods (models/scan.py): less compile
  # time per layer (docs/benchmarks.md, "Memory"); same params tree, same function.
  scan_layers: bool = False
  moe: MoEConfig = MoEConfig()

  def is_moe_layer(self, i):
    """Layer i is MoE iff i >= first_dense and (i - first_dense) % every == every - 1.

    every=1 gives an all-MoE stack, every=2 the interleaved stacks of seed 000
    Table 6(a), first_dense=2 the stacks of Table 7(a) (MoE L = layers - 2).
    """
    m = self.moe
    return (m.num_experts > 0 and i >= m.first_dense and
            (i - m.first_dense) % m.every == m.every - 1)

  @property
  def moe_layers(self):
    return tuple(i for i in range(self.num_layers) if self.is_moe_layer(i))

  @classmethod
  def from_config(cls, config, vocab_size=None):
    """Builds and validates from a ConfigDict with `model` and `moe` groups.

    `vocab_size` fills in `model.vocab_size == 0` (take the tokenizer's size).
    """
    model_kw = _group_kwargs(config.model, cls, 'model', skip=('moe',))
    moe_kw = _group_kwargs(config.moe, MoEConfig, 'moe')
    if model_kw['vocab_size'] == 0 and vocab_size is not None:
      model_kw['vocab_size'] = int(vocab_size)
    if moe_kw['d_ff'] == 0:
      moe_kw['d_ff'] = model_kw['d_ff']
    if moe_kw['router_init_std'] == 0.0 and model_kw['d_model'] > 0:
      # Seed 002 appendix A.6: router weights ~ N(0, 2 / (5 d_model)).
      moe_kw['router_init_std'] = math.sqrt(2.0 / (5.0 * model_kw['d_model']))
    cfg = cls(moe=MoEConfig(**moe_kw), **model_kw)
    cfg.validate()
    return cfg

  def validate(self):
    """Raises ConfigError (one line, naming the key) for an unbuildable model."""
    # The registries import JAX; this module does not, so workdir/files.py and
    # `python -m moe_jax.lineage` stay fast.
    from moe_jax.kernels import attention_cudnn  # pylint: disable=g-import-not-at-top
    from moe_jax.models import dispatch, routers  # pylint: disable=g-import-not-at-top
    for group, cfg in (('model', self), ('moe', self.moe)):   # nan passes every comparison
      for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, float) and not math.isfinite(value):
          raise ConfigError(f'{group}.{f.name}={value} must be a finite number')
    for key in ('vocab_size', 'd_model', 'num_layers', 'num_heads', 'num_kv_heads',
                'head_dim', 'd_ff'):
      if getattr(self, key) <= 0:
        raise ConfigError(f'model.{key}={getattr(self, key)} must be positive'
                          + (' (or filled in from the tokenizer)' if key == 'vocab_size' else ''))
    if self.num_heads % self.num_kv_heads:
      raise ConfigError(f'model.num_heads={self.num_heads} is not divisible by '
                        f'model.num_kv_heads={self.num_kv_heads}')
    if self.head_dim % 2:
      raise ConfigError(f'model.head_dim={self.head_dim} must be even (RoPE rotates pairs)')
    _check_choice('model.dtype', self.dtype, DTYPES)
    _check_choice('model.attention', self.attention, ATTENTIONS)
    if self.attention == 'cudnn':
      attention_cudnn.check(self.dtype, self.head_dim)
    _check_choice('model.norm_position', self.norm_position, NORM_POSITIONS)
    _check_choice('model.remat', self.remat, REMATS)
    _check_choice('model.cross_entropy', self.cross_entropy, CROSS_ENTROPIES)
    if not isinstance(self.scan_layers, bool):
      raise ConfigError(f'model.scan_layers={self.scan_layers!r} must be True or False')
    if self.loss_chunk < 0:
      raise ConfigError(f'model.loss_chunk={self.loss_chunk} must be >= 0 (0: no chunks)')
    if self.init_std <= 0 or self.norm_eps <= 0 or self.rope_theta <= 0:
      raise ConfigError('model.init_std, model.norm_eps and model.rope_theta must be positive')
    _check_choice('model.rope_scaling', self.rope_scaling, ROPE_SCALINGS)
    if self.rope_scaling == 'llama3' and not (
        self.rope_factor > 0 and 0 < self.rope_low_freq_factor < self.rope_high_freq_factor
        and self.rope_original_max_len > 0):
      raise ConfigError(
          f'model.rope_scaling=llama3 needs rope_factor > 0 (got {self.rope_factor}), 0 < '
          f'rope_low_freq_factor < rope_high_freq_factor (got {self.rope_low_freq_factor}, '
          f'{self.rope_high_freq_factor}) and rope_original_max_len > 0 '
          f'(got {self.rope_original_max_len})')
    if self.max_position_embeddings < 0:
      raise ConfigError(f'model.max_position_embeddings={self.max_position_embeddings} must be '
                        '>= 0')
    m = self.moe
    if m.num_experts < 0:
      raise ConfigError(f'moe.num_experts={m.num_experts} must be >= 0')
    if m.num_experts == 0:
      return
    _check_choice('moe.router', m.router, routers.names())
    _check_choice('moe.score', m.score, SCORES)
    _check_choice('moe.order', m.order, ORDERS)
    _check_choice('moe.balance_scope', m.balance_scope, BALANCE_SCOPES)
    _check_choice('moe.router_loss_reduction', m.router_loss_reduction, ROUTER_LOSS_REDUCTIONS)
    _check_choice('moe.dispatch', m.dispatch, dispatch.NAMES)
    if m.dispatch == 'pallas_mosaic_gpu' and self.dtype not in ('bfloat16', 'float16'):
      # Any d_model and d_ff: moe_ffn pads them to the kernels' tiles.
      raise ConfigError(
          "moe.dispatch='pallas_mosaic_gpu' needs model.dtype bfloat16 or float16 (wgmma's "
          f"16-bit operands), got {self.dtype}; use moe.dispatch='pallas'")
    if not 1 <= m.top_k <= m.num_experts:
      raise ConfigError(f'moe.top_k={m.top_k} must be in [1, moe.num_experts={m.num_experts}]')
    if m.d_ff <= 0:
      raise ConfigError(f'moe.d_ff={m.d_ff} must be positive (0 means model.d_ff)')
    if m.num_shared_experts < 0:
      raise ConfigError(f'moe.num_shared_experts={m.num_shared_experts} must be >= 0')
    if m.shared_gate and not m.num_shared_experts:
      raise ConfigError('moe.shared_gate=True gates the shared experts, but '
                        'moe.num_shared_experts=0')
    if m.every < 1 or m.first_dense < 0:
      raise ConfigError(f'moe.every={m.every} must be >= 1 and moe.first_dense='
                        f'{m.first_dense} >= 0')
    if not self.moe_layers:
      raise ConfigError(f'moe.every={m.every}, moe.first_dense={m.first_dense} leave no MoE '
                        f'layer in model.num_layers={self.num_layers}')
    if m.order == 'topk_then_softmax' and m.score != 'softmax':
      raise ConfigError(f"moe.order='topk_then_softmax' needs moe.score='softmax', "
                        f'got {m.score!r}')
    routers.get(m.router).check(m)
    if not 0.0 <= m.jitter < 1.0:
      raise ConfigError(f'moe.jitter={m.jitter} must be in [0, 1)')
    if m.capacity_factor <= 0:
      raise ConfigError(f'moe.capacity_factor={m.capacity_factor} must be positive')
    if m.router_init_std <= 0:
      raise ConfigError(f'moe.router_init_std={m.router_init_std} must be positive (0 means the default)')


def _check_choice(key, value, choices):
  if value not in choices:
    raise ConfigError(f'{key}={value!r} is not one of {choices}')


def _group_kwargs(group, cls, name, skip=()):
  """The group as keyword arguments over the dataclass's defaults (a group
  built by hand may name only some keys); a key the dataclass lacks is an error."""
  fields = {f.name for f in dataclasses.fields(cls)} - set(skip)
  out = config_group.defaults(cls)
  for key, value in group.items():
    if key not in fields:
      raise ConfigError(f'{name}.{key} is not a known key (known: {sorted(fields)})')
    out[key] = value
  return out
