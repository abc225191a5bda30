"""Train on from an existing workdir: an imported pretrained model, an upcycled one, any run.

  python -m moe_jax.main --config=configs/finetune.py:ckpt=/tmp/smollm2,steps=200 --workdir=/tmp/smollm2_ft

The model, MoE, data and tokenizer settings, seq_len and batch_size come from
the source workdir's config.json (the MoE dispatch path goes back to 'auto',
this platform's, unless the source ran `einsum`); training starts from its
newest checkpoint's params (`init_from`) with a fresh optimizer, and reads the
tokenizer from there (`data.tokenizer_path`, with the tokenizer_config.json
beside it), so the new workdir tokenises exactly as the source did. `steps`
and `lr` are the run's length and peak learning rate; any other key can be
overridden with --config.KEY=VALUE.

Memory (docs/benchmarks.md, "Memory"): SmolLM2-135M at the docs' batch of
8 x 512 grew past 24 GB with the plain step. This config runs the batch as
grad_accum_steps=4 microbatches (2 x 512 each; fewer if batch_size does not
divide), the LM head and loss in chunks of seq_len tokens (model.loss_chunk:
no [B, L, 49152] logits) and remat='full' (each block recomputed in the
backward pass; on CPU this saves memory only with
XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false, which
moe_jax.main sets unless XLA_FLAGS names it: moe_jax/xla_flags.py). The update
is the same as the one-batch step's (float32 round-off). Check a setting
before a run: python -m moe_jax.plan --memory --config=configs/finetune.py:ckpt=DIR
"""
import os

from configs import common
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint


def get_config(arg=None):
  arg = common.parse_arg(arg, ckpt='', steps=100, lr=1e-4)
  if not arg.ckpt:
    raise ValueError('configs/finetune.py needs the source workdir: finetune.py:ckpt=DIR')
  # By listing, not Orbax: no backend may start before main sets XLA_FLAGS (remat below).
  step, directory = checkpoint.newest_step(arg.ckpt)
  # The model at that step: the grown one if the source upcycled in-run.
  saved = transition.config_at(checkpoint.workdir_config(arg.ckpt), step)
  config = common.base()
  for group in ('model', 'moe', 'data'):
    config[group].update(saved[group])
  # config.json names the dispatch path that ran there (the trainer resolves
  # 'auto'); the dropless paths compute the same layer, so which one runs here
  # is this platform's choice again. einsum, which drops tokens, stays.
  if config.moe.dispatch != 'einsum':
    config.moe.dispatch = 'auto'
  config.seq_len, config.batch_size = saved.seq_len, saved.batch_size
  config.grad_accum_steps = next(n for n in (4, 2, 1) if config.batch_size % n == 0)
  config.model.update(remat='full', loss_chunk=config.seq_len)
  config.init_from = arg.ckpt
  workdir = os.path.dirname(directory)
  if config.data.tokenizer == 'bpe' and not config.data.tokenizer_path:
    config.data.tokenizer_path = os.path.join(workdir, 'tokenizer.json')
  config.total_steps = arg.steps
  config.opt.update(lr=arg.lr, warmup_steps=min(50, arg.steps // 10))
  config.eval_every_steps = config.checkpoint_every_steps = arg.steps
  return config
