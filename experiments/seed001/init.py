r"""Seed 001's expert-initialisation table at CPU scale: one dense run, upcycled eight ways.

  python -m experiments.launch --config=experiments/seed001/init.py --workdir=DIR
  python -m experiments.seed001.report --study=init --workdir=DIR

The dense run of experiments/seed001/common.py (DENSE steps), upcycled to 8
experts top-2 by each row of seed 001's table and trained UP steps at one
constant LR (the `up_single` recipe), SEEDS seeds each. A seed draws the
router, the noise, the permutations and the random experts (upcycle.seed)
and the trainer's randomness (config.seed); the dense source is shared, so
the arms of one seed differ only by their init and are compared paired.

  copy            every expert a copy of the MLP
  noise_0.001     copy + 0.001 std(W) Gaussian noise (seed 001's "too little")
  noise_0.01      copy + 0.01 std(W) (seed 001's recommendation)
  noise_0.1       copy + 0.1 std(W) ("too much")
  subset          expert e keeps neurons [e F/8, (e+1) F/8), the rest zero
  permute         an independent neuron permutation per expert
  random          every expert re-drawn at the MLP's mean and std (no upcycling
                  of the MLP; attention and embeddings still copied)
  copy_no_balance copy with balance_loss_weight=0 (seed 001: the router collapses)
`:small` (CI): 5 dense steps, 20 upcycled, one seed, the arms of SMALL_ARMS
(a copied and a re-drawn init; every init is an op tested on its own in
tests/upcycle/test_ops.py).
"""
from experiments.seed001 import common
from experiments.seed002 import common as family

SEEDS = 3
ARMS = {   # name: (expert init, noise as a share of std(W), extra keys)
    'copy': ('copy', 0.0, {}),
    'noise_0.001': ('noise', 0.001, {}),
    'noise_0.01': ('noise', 0.01, {}),
    'noise_0.1': ('noise', 0.1, {}),
    'subset': ('subset', 0.0, {}),
    'permute': ('permute', 0.0, {}),
    'random': ('random', 0.0, {}),
    'copy_no_balance': ('copy', 0.0, {'config.moe.balance_loss_weight': 0.0}),
}

SMALL_ARMS = ('copy', 'random')

get_config = common.get_config


def run_name(arm, seed):
  return f'{arm}_s{seed}'


def seeds(arg=None):
  return 1 if common.parse(arg).small else SEEDS


def arms(arg=None):
  return SMALL_ARMS if common.parse(arg).small else tuple(ARMS)


def get_hyper(h, arg=None):
  s = common.steps(arg)
  points = [common.dense(s)]
  for seed in range(seeds(arg)):
    for arm in arms(arg):
      init, noise, keys = ARMS[arm]
      point = common.upcycled(h, s, run_name(arm, seed), False)
      point.update({'upcycle.config': f'{family.UPCYCLE},init={init},noise={noise},seed={seed}',
                    'config.seed': seed, **keys})
      points.append(point)
  return points
