r"""Many dense models into one MoE (Branch-Train-MiX; mergekit-moe): source i's
MLP becomes experts i*g ... (i+1)*g - 1, the rest is averaged.

  python -m moe_jax.upcycle --config=configs/upcycle/merge.py:per_source=2,top_k=2 \
      --src=/tmp/dense_a,/tmp/dense_b --dst=/tmp/merged

The sources must share the architecture and tokenizer (the first difference
is an error). `per_source` is g (the MoE has g x number-of-sources experts);
`router` is random | hidden (mergekit's: each source's mean hidden state,
the other sources' as negatives) | domain (a linear router trained for
`steps` steps to tell the sources apart on `batches` training batches of
each); `shared=mean` averages attention, norms, embeddings and the LM head,
`shared=I` takes them from source I. `init`, `noise`, `drop_ratio` and
`drop_init` are dense_to_moe's expert variants, applied within each
source's g experts. Gates are renormalised top-k, so with top_k <= per_source and a router that keeps
each source's tokens on its experts, the MoE is that source on them, up to
the averaged params (recipe docstring: moe_jax/upcycle/recipes/merge.py).
"""
import ml_collections

from configs import common
from moe_jax.upcycle import recipes


def get_config(arg=None):
  d = recipes.defaults('merge')
  arg = common.parse_arg(arg, per_source=d['experts_per_source'], top_k=1, every=1,
                         router=d['router'], shared=d['shared'], init=d['expert_init'],
                         noise=d['noise'], drop_ratio=d['drop_ratio'],
                         drop_init=d['drop_init'], batches=d['router_batches'],
                         steps=d['domain_steps'], lr=d['domain_lr'], seed=0, bias=False)
  up = common.upcycle()
  up.recipe, up.seed = 'merge', arg.seed
  up.target = ml_collections.ConfigDict({'moe': dict(
      top_k=arg.top_k, every=arg.every, d_ff=0, renormalize=True, use_bias=arg.bias)})
  up.args = ml_collections.ConfigDict(dict(
      experts_per_source=arg.per_source, expert_init=arg.init, noise=arg.noise,
      drop_ratio=arg.drop_ratio, drop_init=arg.drop_init, shared=arg.shared, router=arg.router,
      router_batches=arg.batches, domain_steps=arg.steps, domain_lr=arg.lr))
  return up
