r"""The worked example of docs/experiments.md: five tiny runs on one token budget.

  python -m experiments.launch --config=experiments/example/config.py \
      --workdir=/tmp/example --parallel=2
  python -m experiments.report --workdir=/tmp/example

  dense                 a dense model, T steps; keeps its steps T/3 and 2T/3
  moe4                  E=4, top-2 MoE from scratch, T steps
  moe4to8               the same, grown in-run to E=8 at tau = T/2 (expand_experts)
  src=dense@S_total_steps=N
                        for S = T/3, 2T/3: the dense run's step-S checkpoint
                        sparse-upcycled to E=4 (dense_to_moe) and trained
                        N = T - S more steps, so it ends on the same budget

T is `steps` (default 90: a few minutes on a laptop CPU; `:steps=300` for
curves that separate). The last two names are made from the keys that vary
between the unnamed points; the others are given.
"""
from configs import common


def _arg(arg):
  return common.parse_arg(arg, steps=90)


def get_config(arg=None):
  steps = _arg(arg).steps
  config = common.base()
  common.apply_preset(config, 'tiny')
  # The selection-only router bias balances load (as in seed 000); expand_experts
  # puts its U(-delta, delta) noise on the copies' biases.
  config.moe.update(num_experts=4, top_k=2, use_bias=True)
  config.update(total_steps=steps, batch_size=16, seq_len=64, log_every_steps=5,
                eval_every_steps=steps // 6, eval_batches=4, checkpoint_every_steps=steps // 3)
  config.opt.warmup_steps = 10
  return config


def get_hyper(h, arg=None):
  steps = _arg(arg).steps
  branch = [steps // 3, 2 * steps // 3]
  return h.chainit([
      h.product([h.fixed('name', 'dense'), h.fixed('config.moe.num_experts', 0),
                 h.fixed('config.ckpt.keep_every', steps // 3)]),
      h.fixed('name', 'moe4'),
      h.product([h.fixed('name', 'moe4to8'), h.fixed('config.upcycle.step', steps // 2),
                 h.fixed('config.upcycle.recipe', 'expand_experts')]),
      h.zipit([
          h.sweep('upcycle.src', [h.run('dense', step=s) for s in branch]),
          h.sweep('config.total_steps', [steps - s for s in branch]),
          h.fixed('upcycle.config', 'configs/upcycle/dense_to_moe.py:experts=4,top_k=2',
                  len(branch)),
      ]),
  ])
