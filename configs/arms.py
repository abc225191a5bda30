"""The quickstart's four arms as configs of their own, sized by arguments: the
colab/ notebooks train them one at a time (`configs/quickstart.py` is the
README's main job, the same comparison as a sweep over seeds):

  python -m moe_jax.main --config=configs/arms.py:upcycled --workdir=/tmp/up

  fixed         Fixed-E: E=4 experts (width 192), top-2, the whole run
  upcycled      E=4 until tau = steps / 2, then expand_experts to 2E, top-2 kept
                (seed 000 Definition 3.1: copied experts and router columns,
                U(-delta, delta) on the replicas' router biases)
  fixed2x       Fixed-2E: 2E=8 experts, top-2, the whole run
  dense_to_moe  dense (MLP width 384) until tau, then sparse-upcycled: E=4 exact
                copies of each MLP, top-2 (a larger MoE than the three above)

The MoE runs balance load with the selection-only router bias (aux-loss-free,
as in seed 000) plus a small Switch loss, and renormalise their top-2 gates.

`layers`, `batch` and `seq` size the model and its batches (the notebooks
shrink them to run in CI); logging, evaluation and checkpoints happen every
steps/24, steps/6 and steps/3 steps.
"""
import ml_collections

from configs import common

RUNS = ('fixed', 'upcycled', 'fixed2x', 'dense_to_moe')


def get_config(arg=None):
  arg = common.parse_arg(arg, size='fixed', steps=600, experts=4, layers=2, batch=16, seq=128)
  if arg.size not in RUNS:
    raise ValueError(f'configs/arms.py: run {arg.size!r} is not one of {RUNS}')
  config = common.base()
  common.apply_preset(config, 'tiny')
  config.model.update(d_model=96, num_heads=4, num_kv_heads=2, head_dim=24, d_ff=384,
                      num_layers=arg.layers)
  config.moe.update(num_experts=arg.experts, top_k=2, d_ff=192, use_bias=True,
                    bias_update_rate=1e-3, balance_loss_weight=0.01)
  config.update(total_steps=arg.steps, batch_size=arg.batch, seq_len=arg.seq,
                log_every_steps=max(1, arg.steps // 24), eval_every_steps=max(1, arg.steps // 6),
                eval_batches=8, checkpoint_every_steps=max(1, arg.steps // 3))
  config.opt.update(lr=3e-3, warmup_steps=40, schedule='wsd', decay_fraction=0.2)
  tau = arg.steps // 2
  if arg.size == 'fixed2x':
    config.moe.num_experts = 2 * arg.experts
  elif arg.size == 'upcycled':
    config.upcycle.update(step=tau, recipe='expand_experts', factor=2)
    config.upcycle.args = ml_collections.ConfigDict(dict(delta=1e-3))
  elif arg.size == 'dense_to_moe':
    config.moe.num_experts = 0
    config.upcycle.update(step=tau, recipe='dense_to_moe')
    config.upcycle.target = ml_collections.ConfigDict({'moe': dict(
        num_experts=arg.experts, d_ff=config.model.d_ff)})
  return config


def describe(config):
  """One line: the run's experts and transition."""
  moe, up = config.moe, config.upcycle
  shape = f'{moe.num_experts} experts top-{moe.top_k}' if moe.num_experts else 'dense'
  if up.step:
    return f'{shape}, {up.recipe} at step {up.step} of {config.total_steps}'
  return f'{shape}, {config.total_steps} steps'
