"""What seed 002's sweeps share: a CPU-sized model family, WSD and its branches.

Seed 002 (Liew et al.) trains Llama-style dense models (Table 3: MHA, SwiGLU
with d_mlp = 4 d_model), their 8-expert top-2 MoE counterparts (eq. 15:
Softmax(TopK(Wx)), balance-loss weight 1e-3, no z-loss, appendix A.3) and
upcycled MoEs whose experts are copies of the dense MLP. Every run uses WSD:
warmup, a constant LR, and a linear decay to 10% of the peak at the end
(appendix A.5), and a budget shorter than the longest is a *branch*: the long
run's stable-phase state (params, optimizer state, data position) at D - decay,
decayed over its own last steps (sec. 3.1, "checkpoints are continued-pretrained
reusing the optimizer states from the constant LR stage").

We keep the recipe and shrink the sizes: 2 layers, d_model in SIZES, heads of
16 dims, byte-level Shakespeare, 16 x 64 = 1,024 tokens a step. Two things
differ from the paper on purpose, both because our runs are 25-400 steps long:
the decay takes the last 20% of a run instead of ~10% (a 25-step run would
decay over 2 steps), and the peak LRs are not tuned per size: dense 4e-3 and
MoE 2e-3 are Table 5's 44M / 0.1B rows (the MoE LR is half the dense one).
"""
import math

from configs import common

SIZES = (32, 48, 64)      # d_model
HEAD_DIM = 16
EXPERTS, TOP_K = 8, 2
LR_DENSE, LR_MOE = 4e-3, 2e-3
FINAL_LR_FRACTION = 0.1   # WSD decays to 10% of the peak (appendix A.5)
DECAY = 0.2               # share of a run in the WSD decay
UPCYCLE = f'configs/upcycle/dense_to_moe.py:experts={EXPERTS},top_k={TOP_K},bias=False'


def parse(arg, **more):
  """A study's argument: `small` (the CI variant) and the study's own keys."""
  return common.parse_arg(arg, small=False, **more)


def config(small=False):
  """A dense run of the family at the smallest size (points set the size, the
  experts and the LR). `small` shortens warmup and logging for CI's few steps."""
  config = common.base()
  common.apply_preset(config, 'tiny')
  heads = SIZES[0] // HEAD_DIM
  config.model.update(num_layers=2, d_model=SIZES[0], num_heads=heads, num_kv_heads=heads,
                      head_dim=HEAD_DIM, d_ff=4 * SIZES[0])
  config.moe.update(num_experts=0, top_k=TOP_K, order='topk_then_softmax',
                    balance_loss_weight=1e-3, z_loss_weight=0.0)
  config.opt.update(lr=LR_DENSE, schedule='wsd', warmup_steps=2 if small else 10,
                    decay_fraction=DECAY, final_lr_fraction=FINAL_LR_FRACTION)
  config.update(batch_size=16, seq_len=64, log_every_steps=1 if small else 10,
                eval_every_steps=40, eval_batches=2 if small else 16)
  config.ckpt.async_save = False   # tiny checkpoints: a synchronous save is quicker
  return config


def size(d_model):
  """The keys of one size: heads of HEAD_DIM, d_ff = 4 d_model (Table 3)."""
  heads = d_model // HEAD_DIM
  return {'config.model.d_model': d_model, 'config.model.num_heads': heads,
          'config.model.num_kv_heads': heads, 'config.model.d_ff': 4 * d_model}


def moe(lr=LR_MOE):
  """The keys of an 8-expert top-2 MoE trained at `lr`."""
  return {'config.moe.num_experts': EXPERTS, 'config.opt.lr': lr}


def decay_steps(total):
  return max(1, round(DECAY * total))


def long_run(name, total, branch_totals, **keys):
  """A run of `total` steps that keeps the stable-phase checkpoints its
  branches (of `branch_totals` steps) start from."""
  starts = [t - decay_steps(t) for t in branch_totals if t != total]
  every = math.gcd(*starts) if starts else total
  return dict({'name': name, 'config.total_steps': total, 'config.checkpoint_every_steps': every,
               'config.ckpt.keep_every': every}, **keys)


def branch(h, parent, total, name, **keys):
  """A WSD decay branch: `parent`'s state at total - decay, decayed to `total`."""
  d = decay_steps(total)
  return dict({'name': name, 'resume_from': h.run(parent, step=total - d),
               'config.total_steps': total, 'config.opt.decay_fraction': d / total,
               'config.checkpoint_every_steps': total, 'config.ckpt.keep_every': 0}, **keys)


def family(h, name, totals, start=None, **keys):
  """A long run of max(totals) steps (with the `start` keys: where it starts
  from) and a decay branch for every shorter total; `name(total)` names each.
  Returns the points, the long run first."""
  longest = max(totals)
  points = [long_run(name(longest), longest, totals, **(start or {}), **keys)]
  points += [branch(h, name(longest), t, name(t), **keys) for t in sorted(totals) if t != longest]
  return points


def upcycled(h, src, src_step):
  """The start of a run grown from `src`'s checkpoint at `src_step` by copying
  its MLPs into the experts (seed 002 sec. 3.2)."""
  return {'upcycle.config': UPCYCLE, 'upcycle.src': h.run(src, step=src_step)}
