"""A CPU-sized training config shared by the trainer tests."""
from configs import common


def config(**overrides):
  c = common.base()
  c.model.update(d_model=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, d_ff=64)
  c.moe.update(num_experts=4, top_k=2)
  c.update(total_steps=6, batch_size=8, seq_len=32, log_every_steps=1, eval_every_steps=3,
           eval_batches=2, checkpoint_every_steps=3)
  c.opt.warmup_steps = 2
  c.ckpt.async_save = False
  for key, value in overrides.items():
    target = c
    *groups, leaf = key.split('.')
    for g in groups:
      target = target[g]
    target[leaf] = value
  return c
