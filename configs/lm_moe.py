"""MoE LM trained from scratch on the default corpus (Shakespeare).

  python -m moe_jax.main --config=configs/lm_moe.py:tiny --workdir=/tmp/moe

`tiny` is a CPU-sized run (8 experts, top-2, loss-free bias balancing as in
seed 000, so `configs/upcycle/expand_experts.py` applies as the seed does; a
few minutes on 2 cores); no argument is the 10-layer interleaved MoE of seed
000 Table 6(a). Other presets: `20layer`, `8layer`, `full_4layer` ...
`full_10layer` (Table 7(a)), `dense_15m` ... `8x1b` (seed 002 Table 3). A paper
preset also sets the paper's training settings (context, schedule, learning
rate, steps where stated; moe_jax/models/presets.py lists them).
"""
from configs import common


def get_config(arg=None):
  arg = common.parse_arg(arg, size='10layer')
  config = common.base()
  common.apply_preset(config, arg.size)
  if arg.size == 'tiny':
    config.moe.update(num_experts=8, top_k=2, use_bias=True)
  return config
