"""Dense Llama-style LM trained from scratch on the default corpus (Shakespeare).

  python -m moe_jax.main --config=configs/lm_dense.py:tiny --workdir=/tmp/dense

`tiny` is a CPU-sized run (a few minutes on 2 cores); a preset name
(`dense_15m`, `dense_44m`, `dense_0.1b` ... `dense_1b`: seed 002 Table 3) gives that model, trained as seed
002 Tables 4-5 say (moe_jax/models/presets.py).
"""
from configs import common


def get_config(arg=None):
  arg = common.parse_arg(arg, size='tiny')
  config = common.base()
  common.apply_preset(config, arg.size)
  config.moe.num_experts = 0
  return config
