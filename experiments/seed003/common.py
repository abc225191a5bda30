"""Seed 003 (orthogonal growth of MoE) at CPU scale: the model, the plan and the
runs every study shares.

The model follows seed 003 App. D.1 and D.3 in kind, not in size: GQA + RoPE,
RMSNorm, an MoE FFN in every layer with sigmoid router scores (renormalised
over the top-k, so width growth is function-preserving), no router bias, a
sequence-level balance loss; AdamW (0.9, 0.95), weight decay 0.1, init std
0.02; warmup, a constant LR, and a linear decay to a tenth of it over the last
20% of the steps (WSD). Sizes (`full`, and `small` for CI):

              layers d_model E top-k expert d_ff batch x seq  base steps  grown steps
  full        4      64      8  2     128          8 x 64       800         100
  small       2      32      4  1     32           4 x 16       4           4

(`full` is sized for the shared 2-core machine: one run at a time, the whole
sweep in about two hours under other jobs' load; docs/seed003.md.)

`base` trains the small model through its decay and keeps a checkpoint every
`every` steps; its last one is the "converged" checkpoint, its first the
"early" one. Grown runs start from these (python -m moe_jax.upcycle, as the
launcher's `upcycle.config` + `upcycle.src`) with a fresh optimizer and the
same schedule shape over their own steps. Run names are fixed, so the studies
can share runs (all.py runs every study on one base).
"""
import dataclasses

from configs import common
from moe_jax.models import accounting, config as model_config

BASE, BASE_POST, SCRATCH = 'base', 'base_post', 'scratch'
DEPTH_CONFIG = 'configs/upcycle/grow_depth.py'
WIDTH_CONFIG = 'configs/upcycle/grow_width.py'
RETENTION_ALPHA = 0.01   # seed 003 §3.2's choice for width growth


@dataclasses.dataclass(frozen=True)
class Plan:
  layers: int
  d_model: int
  experts: int
  top_k: int
  expert_ff: int
  batch: int
  seq: int
  steps: int          # the base runs
  every: int          # the base runs keep a checkpoint every `every` steps
  warmup: int
  additional: int     # steps of a grown run in the fixed-additional-budget studies
  retain: int         # steps of a post-norm retention run after growth
  eval_every: int
  eval_batches: int
  alphas: tuple       # width-growth noise scales (Fig. 4)

  @property
  def checkpoints(self):
    """The base's kept steps: where grown runs may start."""
    return tuple(range(self.every, self.steps + 1, self.every))


PLANS = {
    'full': Plan(layers=4, d_model=64, experts=8, top_k=2, expert_ff=128, batch=8, seq=64,
                 steps=800, every=160, warmup=40, additional=100, retain=20, eval_every=40,
                 eval_batches=8, alphas=(0.0, 0.01, 0.05, 0.1)),
    'small': Plan(layers=2, d_model=32, experts=4, top_k=1, expert_ff=32, batch=4, seq=16,
                  steps=4, every=2, warmup=1, additional=4, retain=1, eval_every=2,
                  eval_batches=1, alphas=(0.0, 0.01)),
}


def plan(arg):
  """'' or 'full' -> the full plan; 'small' -> the CI plan."""
  name = arg or 'full'
  if name not in PLANS:
    raise ValueError(f'argument {name!r} is not one of {sorted(PLANS)}')
  return PLANS[name]


def budget(arg, full, small):
  """A sweep's budget dict: `small` for `:small`, else `full` (an argument
  `plan` does not know is an error)."""
  if (arg or 'full') == 'small':
    return small
  plan(arg)
  return full


def get_config(arg=None):
  """The base model's training run (the sweeps override it per run)."""
  return config_for(plan(arg))


def config_for(p):
  config = common.base()
  config.model.update(d_model=p.d_model, num_layers=p.layers, num_heads=4, num_kv_heads=2,
                      head_dim=p.d_model // 4, d_ff=4 * p.d_model, init_std=0.02)
  config.moe.update(num_experts=p.experts, top_k=p.top_k, d_ff=p.expert_ff, score='sigmoid',
                    renormalize=True, use_bias=False, balance_scope='sequence',
                    balance_loss_weight=0.01)
  config.update(total_steps=p.steps, batch_size=p.batch, seq_len=p.seq,
                log_every_steps=max(p.eval_every // 2, 1), eval_every_steps=p.eval_every,
                eval_batches=p.eval_batches, checkpoint_every_steps=p.every)
  config.opt.update(lr=3e-3, b1=0.9, b2=0.95, weight_decay=0.1, schedule='wsd',
                    warmup_steps=p.warmup, decay_fraction=0.2, final_lr_fraction=0.1)
  return config


def flops_per_token(config):
  """Forward FLOPs per token of config's model (moe_jax/models/accounting.py)."""
  cfg = model_config.from_config(config, vocab_size=1)
  return accounting.forward_flops_per_token(cfg, config.seq_len)


def base(h, p, name=BASE, norm_position='pre'):
  """The base run: the small model trained through its WSD decay, keeping its
  checkpoints at `p.checkpoints` for the grown runs."""
  return [{'name': name, 'config.model.norm_position': norm_position,
           'config.ckpt.keep_every': p.every}]


def _grown(h, name, recipe_config, src, step, steps, overrides):
  point = {'name': name, 'upcycle.config': recipe_config, 'upcycle.src': h.run(src, step),
           'config.total_steps': steps}
  point.update(overrides)
  return [point]


def depth(h, p, method, step, steps=None, name=None, src=BASE, norm_position='pre'):
  """The base's checkpoint at `step` grown x2 in depth by `method` (stack |
  interpose, seed 003 eqs. 1-2), then trained `steps` (default: additional)."""
  return _grown(h, name or f'{method}@{step}', f'{DEPTH_CONFIG}:method={method}', src, step,
                steps or p.additional, {'config.model.num_layers': 2 * p.layers,
                                        'config.model.norm_position': norm_position})


def width(h, p, alpha, step, steps=None, name=None, src=BASE, norm_position='pre'):
  """The base's checkpoint at `step` grown x2 in width (E and top-k doubled,
  N(0, (alpha sigma)^2) on the new experts and router columns, seed 003 §3.2)."""
  return _grown(h, name or f'width_a{alpha:g}@{step}', f'{WIDTH_CONFIG}:alpha={alpha}', src,
                step, steps or p.additional,
                {'config.moe.num_experts': 2 * p.experts, 'config.moe.top_k': 2 * p.top_k,
                 'config.model.norm_position': norm_position})


def scratch(h, p, steps=None):
  """The grown (2x deeper) model trained from scratch: zero sunk cost."""
  return [{'name': SCRATCH, 'config.model.num_layers': 2 * p.layers,
           'config.total_steps': steps or p.additional}]


def unique(points):
  """The points with repeats (one name, one point) dropped; one name with two
  different points is an error."""
  out = {}
  for point in points:
    name = point['name']
    if name in out and out[name] != point:
      raise ValueError(f'two different points are both named {name!r}')
    out.setdefault(name, point)
  return list(out.values())
