r"""Seed 003 on its own axes (issue 63): depth growth x2 against the grown model
from scratch at equal additional FLOPs (Fig. 7) and at equal total FLOPs
(Fig. 8), from a stable base and from an annealed one (Fig. 3's "converged
checkpoint"), with the two bases' layer-wise norm profiles.

  python -m experiments.launch --config=experiments/seed003/equal_flops.py \
      --workdir=DIR --parallel=2
  python -m experiments.seed003.report --workdir=DIR

Per seed s (config.seed; SEEDS = 3, each seed with its own bases):
  base_stable_s{s}        the `full` model (common.py), BASE = 400 steps: warmup,
                          then a constant LR (the stable phase seed 003 grows from)
  base_annealed_s{s}      its decay branch: base_stable_s{s} at 360, decayed to a
                          tenth of the LR over steps 360-400. Both bases end at
                          step 400, so they have the same sunk FLOPs
  {method}_{base}_{n}_s{s}
                          base_{base}_s{s} at 400 grown x2 in depth by method
                          (interpose, the paper's, or stack: eqs. 2 and 1) and
                          trained n in MORE more steps on its own schedule: a
                          fresh optimizer, WARMUP steps of warmup, a constant LR,
                          a linear decay over the last 10 %
  scratch_total_{n}_s{s}  the grown model from random init on its own schedule
                          of that shape, for the steps whose FLOPs equal the
                          base's 400 plus the grown run's n (`total_steps`:
                          n + 200 here, the grown model costs 2.0x the base per
                          token): Fig. 8's fixed total budget
  scratch_additional_{n}_s{s}
                          the same for n steps, the grown run's additional
                          FLOPs: Fig. 7's zero-sunk-cost point
Every run trains to its own total_steps with its own decay; none is a branch
cut of a longer run (the annealed base is the base's branch by design: the
paper's converged checkpoints are a decayed continuation of its runs).
FLOPs are 3 x forward FLOPs per token (moe_jax/models/accounting.py) x tokens.

What it answers, against seed 003's claims: growth beats scratch at a fixed
additional budget (Fig. 7); growth is on par with or better than scratch at
a fixed total budget (Fig. 8); interposition beats stacking from a converged
(annealed) checkpoint (Fig. 3); a constant-LR checkpoint grows at least as
well as an annealed one (§4.1's advice). The report (seed003/report.py)
pairs the runs by seed with 95 % t intervals and tabulates the bases' norms.

Size: 14 runs per seed, 42 in all; 440 steps of the 4-layer base and 7,600 of
the 8-layer model per seed. At the steps' cost in docs/seed003/regime.json
(0.12 s and 0.17 s a step, measured two runs at a time on the shared 2-core
machine) that is about 70 minutes of summed run time; the 42 runs took 35
minutes of wall time with --parallel=2 on 2026-11-28 (docs/seed003.md).
`:small` is CI's variant (the `small` plan, a few steps, one seed, one n).
"""
import math

from experiments.seed003 import common, regime

SEEDS = 3
BASE = 400
MORE = (400, 800)
WARMUP = regime.WARMUP
SMALL = dict(seeds=1, base=4, more=(4,), warmup=1)
METHODS = ('interpose', 'stack')
BASES = ('stable', 'annealed')

get_config = common.get_config


def budget(arg=None):
  """dict(seeds, base, more, warmup) of the full sweep or of `:small`."""
  return common.budget(arg, dict(seeds=SEEDS, base=BASE, more=MORE, warmup=WARMUP), SMALL)


def _grown_config(p):
  config = common.config_for(p)
  config.model.num_layers = 2 * p.layers
  return config


def total_steps(p, base, n):
  """Steps of the grown model from scratch whose FLOPs equal `base` steps of the
  base model plus `n` of the grown one (the same tokens per step for all)."""
  small = common.flops_per_token(common.config_for(p))
  grown = common.flops_per_token(_grown_config(p))
  return n + round(base * small / grown)


def anneal_steps(total):
  """The annealed base's decay: the last 10 % of the base, at least two steps
  (a one-step decay trains that step at the peak LR: no annealing at all)."""
  return max(2, regime.decay_steps(total))


def _bases(h, p, b, s):
  """The stable base and its annealed decay branch, both ending at b['base']."""
  stable, total = f'base_stable_s{s}', b['base']
  start = total - anneal_steps(total)
  every = math.gcd(start, total)
  return [
      {'name': stable, 'config.seed': s, 'config.total_steps': total,
       'config.opt.schedule': 'constant', 'config.opt.warmup_steps': p.warmup,
       'config.checkpoint_every_steps': every, 'config.ckpt.keep_every': every},
      dict(name=f'base_annealed_s{s}', resume_from=h.run(stable, step=start),
           **{'config.seed': s, 'config.total_steps': total, 'config.opt.schedule': 'wsd',
              'config.opt.warmup_steps': p.warmup,
              'config.opt.decay_fraction': (total - start) / total},
           **{'config.checkpoint_every_steps': total, 'config.ckpt.keep_every': 0})]


def _grown(h, p, b, s, method, base, n):
  return dict(name=f'{method}_{base}_{n}_s{s}',
              **{'upcycle.config': f'{common.DEPTH_CONFIG}:method={method}',
                 'upcycle.src': h.run(f'base_{base}_s{s}', step=b['base']),
                 'config.seed': s, 'config.model.num_layers': 2 * p.layers},
              **regime.schedule(n, b['warmup']), **{'config.checkpoint_every_steps': n})


def _scratch(p, s, kind, n, steps):
  return dict(name=f'scratch_{kind}_{n}_s{s}',
              **{'config.seed': s, 'config.model.num_layers': 2 * p.layers},
              **regime.schedule(steps, p.warmup), **{'config.checkpoint_every_steps': steps})


def seed_points(h, p, b, s):
  out = _bases(h, p, b, s)
  for n in b['more']:
    out += [_grown(h, p, b, s, method, base, n) for base in BASES for method in METHODS]
    out += [_scratch(p, s, 'total', n, total_steps(p, b['base'], n)),
            _scratch(p, s, 'additional', n, n)]
  return out


def get_hyper(h, arg=None):
  p, b = common.plan(arg), budget(arg)
  return [point for s in range(b['seeds']) for point in seed_points(h, p, b, s)]
