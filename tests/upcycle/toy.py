"""Hand-built param trees with the documented paths and shapes (docs/internals.md)."""
import jax
import numpy as np

from configs import common


def config(num_experts=0, top_k=2, layers=2, every=1, first_dense=0, use_bias=False, d_ff=16,
           moe_d_ff=0):
  c = common.base()
  c.model.update(vocab_size=11, d_model=8, num_layers=layers, num_heads=2, num_kv_heads=1,
                 head_dim=4, d_ff=d_ff)
  c.moe.update(num_experts=num_experts, top_k=top_k, every=every, first_dense=first_dense,
               use_bias=use_bias, d_ff=moe_d_ff)
  return c


def kinds(c):
  from moe_jax.upcycle import layout
  return layout.layer_kinds(c)


def shapes(c):
  """{path: shape} of a model built from config c."""
  m, e = c.model, c.moe
  d, f, fe = m.d_model, m.d_ff, e.d_ff or m.d_ff
  out = {'embed/embedding': (m.vocab_size, d), 'final_norm/scale': (d,),
         'lm_head': (d, m.vocab_size)}
  for i, kind in enumerate(kinds(c)):
    p = f'layers_{i}/'
    out.update({p + 'attn_norm/scale': (d,), p + 'mlp_norm/scale': (d,),
                p + 'attn/q': (d, m.num_heads, m.head_dim),
                p + 'attn/k': (d, m.num_kv_heads, m.head_dim),
                p + 'attn/v': (d, m.num_kv_heads, m.head_dim),
                p + 'attn/o': (m.num_heads, m.head_dim, d)})
    if kind == 'dense':
      out.update({p + 'mlp/wi_0': (d, f), p + 'mlp/wi_1': (d, f), p + 'mlp/wo': (f, d)})
    else:
      out.update({p + 'moe/router/w': (d, e.num_experts), p + 'moe/experts/wi_0': (e.num_experts, d, fe),
                  p + 'moe/experts/wi_1': (e.num_experts, d, fe),
                  p + 'moe/experts/wo': (e.num_experts, fe, d)})
      if e.use_bias:
        out[p + 'moe/router/bias'] = (e.num_experts,)
  return out


def abstract(c):
  from moe_jax.upcycle import paths
  return paths.unflatten({k: jax.ShapeDtypeStruct(s, np.float32) for k, s in shapes(c).items()})


def params(c, seed=0):
  from moe_jax.upcycle import paths
  rng = np.random.default_rng(seed)
  return paths.unflatten({k: rng.normal(size=s).astype(np.float32)
                          for k, s in shapes(c).items()})
