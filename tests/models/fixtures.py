"""Shared test inputs: tiny MoE FFN operands for the routing cases."""
import jax
import jax.numpy as jnp
import numpy as np

from configs import common
from moe_jax.models import config as model_config

ROUTINGS = ('uniform', 'skewed', 'all_to_one', 'empty_experts')


def routing(kind, tokens, experts, top_k, rng):
  """[T, k] int32 expert choices, distinct within a token."""
  if kind == 'uniform':
    logits = rng.normal(size=(tokens, experts))
  elif kind == 'skewed':
    # Gumbel top-k over p_e ~ 1 / (e + 1)^2: expert 0 gets most of the load.
    logp = -2.0 * np.log(np.arange(1, experts + 1))
    logits = logp + rng.gumbel(size=(tokens, experts))
  elif kind == 'all_to_one':
    logits = rng.normal(size=(tokens, experts))
    logits[:, experts - 1] = 100.0   # every token's first choice is the last expert
  elif kind == 'empty_experts':
    logits = rng.normal(size=(tokens, experts))
    logits[:, ::2] = -100.0          # even experts never chosen (top_k <= E / 2)
  else:
    raise ValueError(kind)
  return np.argsort(-logits, axis=-1)[:, :top_k].astype(np.int32)


def moe_inputs(kind, tokens=37, experts=8, top_k=2, d=16, f=24, seed=0):
  rng = np.random.default_rng(seed)
  idx_Tk = routing(kind, tokens, experts, top_k, rng)
  gates_Tk = rng.uniform(0.1, 1.0, size=(tokens, top_k))
  gates_Tk /= gates_Tk.sum(-1, keepdims=True)
  f32 = lambda *s: jnp.asarray(rng.normal(size=s) * 0.3, jnp.float32)
  return dict(x_TD=f32(tokens, d), idx_Tk=jnp.asarray(idx_Tk),
              gates_Tk=jnp.asarray(gates_Tk, jnp.float32), wi_0_EDF=f32(experts, d, f),
              wi_1_EDF=f32(experts, d, f), wo_EFD=f32(experts, f, d))


def tiny_config(vocab_size=61, **moe):
  """A ConfigDict with the tiny model and the given `moe` overrides."""
  config = common.base()
  config.model.vocab_size = vocab_size
  config.model.num_layers = 2
  config.model.d_model = 32
  config.model.num_heads = 4
  config.model.num_kv_heads = 2
  config.model.head_dim = 8
  config.model.d_ff = 48
  config.moe.update(moe)
  return config


def tiny_model_config(**moe):
  return model_config.from_config(tiny_config(**moe))


def tokens(batch, length, vocab_size=61, seed=0):
  return jax.random.randint(jax.random.key(seed), (batch, length), 0, vocab_size)


def random_params(cfg, seed=0, std=0.1):
  """Params with the model's tree, filled by numpy: far cheaper than `init`,
  whose per-leaf RNG kernels take seconds to compile on a shared CPU."""
  from moe_jax.models import transformer  # pylint: disable=g-import-not-at-top
  shapes = jax.eval_shape(transformer.Transformer(cfg).init, jax.random.key(0),
                          jnp.zeros((1, 4), jnp.int32))['params']
  rng = np.random.default_rng(seed)

  def fill(path, s):
    name = jax.tree_util.keystr(path)
    if 'scale' in name:
      return jnp.ones(s.shape, jnp.float32)
    if 'bias' in name:
      return jnp.zeros(s.shape, jnp.float32)
    return jnp.asarray(rng.normal(size=s.shape) * std, jnp.float32)
  return jax.tree_util.tree_map_with_path(fill, shapes)


def packed_batch(length):
  """Two rows of `length` tokens: row 0 packs documents of 5 and length - 5
  tokens (segment ids 1, 2; positions restart), row 1 is one document."""
  seg = jnp.asarray([[1] * 5 + [2] * (length - 5), [1] * length], jnp.int32)
  pos = jnp.asarray([list(range(5)) + list(range(length - 5)), list(range(length))], jnp.int32)
  return tokens(2, length), seg, pos


def packed_loss_and_grads(cfg, params, batch):
  """A model's mean first-token log-probability on `packed_batch` and its
  gradient: the quantity the attention paths' model tests compare."""
  from moe_jax.models import transformer  # pylint: disable=g-import-not-at-top
  model, (toks, seg, pos) = transformer.Transformer(cfg), batch

  def loss(p):
    logits = model.apply({'params': p}, toks, segment_ids=seg, positions=pos)[0]
    return jnp.mean(jax.nn.log_softmax(logits.astype(jnp.float32))[..., 0])
  return jax.value_and_grad(loss)(params)
