"""MoE LM trained from scratch on the default corpus (Shakespeare).

  python -m moe_jax.main --config=configs/lm_moe.py:tiny --workdir=/tmp/moe

`tiny` is a CPU-sized run (8 experts, top-2; a few minutes on 2 cores); no
argument is the 10-layer interleaved MoE of seed 000 Table 6(a). Other presets:
`20layer`, `8layer`, `full_4layer` ... `full_10layer` (Table 7(a)),
`dense_15m` ... `8x1b` (seed 002 Table 3).
"""
from configs import common


def get_config(arg=None):
  arg = common.parse_arg(arg, size='10layer')
  config = common.base()
  common.apply_preset(config, arg.size)
  if arg.size == 'tiny':
    config.moe.num_experts, config.moe.top_k = 8, 2
  return config
