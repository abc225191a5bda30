"""Sparse upcycling (seed 001; seeds 002, 004): a dense checkpoint becomes an MoE
whose experts start as copies of its MLPs; the router starts fresh.

  python -m moe_jax.upcycle --config=configs/upcycle/dense_to_moe.py:experts=8,top_k=2 \
      --src=/tmp/dense --dst=/tmp/dense_to_moe

`init` is copy | noise | subset | permute | drop (drop-upcycling, `drop_ratio`
of each expert's neurons re-initialised as `drop_init` says) | random
(every expert re-drawn at the MLP's mean and std: seed 001's no-upcycling
row). Experts are as wide as the MLP they
copy (`d_ff=0`, whatever moe.d_ff the source's config carries); `subset` takes
a narrower `d_ff`. With `copy` and renormalised top-k
gates the MoE computes exactly the dense function (the report shows
max |delta logits| ~ 1e-6). `seed` draws the fresh router (and any noise), so
replicate runs of a study (seed 004's three seeds) start from their own router.
`bias` (moe.use_bias: the selection-only bias of loss-free balancing) is on by
default, as in configs/lm_moe.py:tiny, so the MoE this writes is the one that
config describes and `expand_experts` (whose replica noise needs the bias)
applies next; `bias=False` gives a router without it (seeds 002 and 004).
`renormalize=False` keeps the picked softmax probabilities as the gates,
seed 004's G(x) = TopK(softmax(Wx)): the copies' output is then scaled by
the picked mass (not function-preserving: the report shows the loss jump),
and the router learns from the first step, where with renormalised gates and
identical copies the LM loss gives it no gradient at all
(tests/models/test_router.py). `rescale=gate_mass` multiplies each copy's
`wo` by experts / top_k, the inverse of a uniform router's picked mass, and
`router_std` (0: the default 2 / (5 d_model) variance) draws the router
narrow enough to be near uniform: with both, unnormalised gates start close
to the dense function and still teach the router (the recipe's docstring).
"""
import ml_collections

from configs import common
from moe_jax.upcycle import recipes


def get_config(arg=None):
  d = recipes.defaults('dense_to_moe')
  arg = common.parse_arg(arg, experts=8, top_k=2, every=1, d_ff=0, init=d['expert_init'],
                         noise=d['noise'], drop_ratio=d['drop_ratio'],
                         drop_init=d['drop_init'], router_init=d['router_init'], seed=0,
                         bias=True, renormalize=True, rescale=d['rescale'], router_std=0.0)
  up = common.upcycle()
  up.recipe, up.seed = 'dense_to_moe', arg.seed
  up.target = ml_collections.ConfigDict({'moe': dict(
      num_experts=arg.experts, top_k=arg.top_k, every=arg.every, d_ff=arg.d_ff,
      renormalize=arg.renormalize, use_bias=arg.bias,
      router_init_std=arg.router_std)})
  up.args = ml_collections.ConfigDict(dict(
      expert_init=arg.init, noise=arg.noise, drop_ratio=arg.drop_ratio,
      drop_init=arg.drop_init, router_init=arg.router_init, rescale=arg.rescale))
  return up
