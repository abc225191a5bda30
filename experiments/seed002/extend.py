r"""Seed 002's grid extended until eq. 13's D* lies inside the data (issue 36),
and the D1 = D2 points that bracket it, over seeds (issue 63).

  python -m experiments.launch --config=experiments/seed002/extend.py --workdir=DIR --parallel=2
  python -m experiments.seed002.report --study=grid --workdir=DIR
  python -m experiments.launch --config=experiments/seed002/extend.py:diagonal --workdir=DIR2 \
    --parallel=2
  python -m experiments.launch --config=experiments/seed002/extend.py:bracket,seeds=3 \
    --workdir=DIR3 --parallel=2
  python -m experiments.seed002.report --study=seeds --workdir=DIR3

The grid of experiments/seed002/grid.py (same family, names and WSD
branches) at the smallest and the largest size, with budgets 4 to 16 times
longer, so that eq. 13's diagonal (D1 = D2 = D against the MoE from scratch
at D) runs from 1.6M to 6.6M tokens. The budgets were chosen after seeing
two earlier runs: the grid's fitted D* (7.7e5 to 1.4e6 tokens) lay beyond
its longest budget, and a first extension to D1 = D2 = 1,600 steps
(docs/seed002/extend1.json) put it at 3.2e6 to 5.3e6 tokens, again beyond.
`:diagonal` runs eq. 13's diagonal alone one step further, D1 = D2 = D =
12,800 steps (13.1M tokens), past the D* this extension's fits give
(8e6 to 1.1e7 tokens; chosen after seeing them): three runs per size, one
WSD run each, no branches.

`:bracket` runs the diagonal at both ends of the bracket those runs drew
(upcycling ahead at 6,400 steps, the MoE from scratch at 12,800; one seed
each): per size and D the dense run of D steps, the model upcycled from its
last checkpoint and trained D steps, the MoE from scratch of D steps, each
one WSD run. The 12,800-step runs are `:diagonal`'s; the 6,400-step ones are
the extension's long runs (those kept a checkpoint every 1,280 steps for
their branches, these keep the last only).

`seeds=N` (any plan; default 1) repeats every run for config.seed = 0 ..
N-1, the seed of every init and of the data order; an upcycled run's router
draws from it too (the upcycle config's `seed`). Seed 0 is the config's own:
its runs are today's, key for key, under today's names, and seed s > 0
suffixes every name `_s{s}`. A new --workdir runs seed 0 again at the
checkout's commit, so all seeds come from one commit: the committed seed-0
runs ran at 7a1640e, before the CPU attention default changed, which moved
runs by 0.003-0.013 nats (docs/rerun_drift.md), as much as the margins the
bracket rests on.

Cost, from the committed wall_s at one run at a time: a seed of
`:diagonal` is 6 runs, 202 + 382 + 350 s at N1 = 32,928 and 477 + 967 +
1,021 s at 131,392 (docs/seed002/extend_diagonal.json), 3,399 s; a seed of
`:bracket` adds the 6,400-step runs, 533 s and 1,108 s (docs/seed002/
extend.json), 12 runs and 5,040 s. So `:bracket,seeds=3` is 36 runs and
4.2 hours of run time, about 2.1 hours of wall time at --parallel=2;
`:diagonal,seeds=3` is 18 runs, 2.8 hours, about 1.4 at --parallel=2.

`:small` is CI's: alone, the grid's CI variant; with `diagonal` or
`bracket`, the smallest size at D = 10 steps, or 5 and 10
(`:small,diagonal,seeds=2`: 6 runs, under two minutes on 2 cores).
"""
from experiments import hyper, sweep
from experiments.seed002 import common, grid

EXTEND = dict(sizes=(common.SIZES[0], common.SIZES[-1]), dense=(1600, 3200, 6400),
              up=(1600, 3200, 6400), moe=(1600, 3200, 6400))
DIAGONAL_D, BRACKET_D = (12800,), (6400, 12800)   # steps
SMALL_DIAGONAL_D, SMALL_BRACKET_D = (10,), (5, 10)


def diagonal(sizes, d):
  """Eq. 13's two sides at D1 = D2 = `d` steps and their dense source, per size."""
  return dict(sizes=sizes, dense=(d,), up=(d,), moe=(d,))


DIAGONAL = diagonal(EXTEND['sizes'], DIAGONAL_D[0])


def parse(arg=None):
  arg = common.parse(arg, diagonal=False, bracket=False, seeds=1)
  if arg.diagonal and arg.bracket:
    raise ValueError('give one of diagonal, bracket')
  if arg.seeds < 1:
    raise ValueError(f'seeds={arg.seeds} must be at least 1')
  return arg


def plans(arg=None):
  """The grids (grid.points' budgets) one seed runs: the extension, or one
  diagonal per D of `:diagonal` / `:bracket`."""
  arg = parse(arg)
  if not (arg.diagonal or arg.bracket):
    return [grid.SMALL if arg.small else EXTEND]
  ds = ((SMALL_BRACKET_D if arg.small else BRACKET_D) if arg.bracket else
        SMALL_DIAGONAL_D if arg.small else DIAGONAL_D)
  return [diagonal(grid.SMALL['sizes'] if arg.small else EXTEND['sizes'], d) for d in ds]


def seeded(points, seed):
  """`points` as replicate `seed`: config.seed and the upcycled router's seed
  set to it, every name and run reference suffixed `_s{seed}`. Seed 0 is the
  config's own, so its points stay as they are (the committed names keep
  their meaning)."""
  if seed == 0:
    return points
  rename = lambda v: sweep.REF.sub(lambda m: f'{{run:{m.group(1)}_s{seed}}}', v)
  out = []
  for point in points:
    point = {k: rename(v) if isinstance(v, str) else v for k, v in point.items()}
    point.update({'name': f'{point["name"]}_s{seed}', 'config.seed': seed})
    if hyper.UPCYCLE_CONFIG in point:
      point[hyper.UPCYCLE_CONFIG] += f',seed={seed}'
    out.append(point)
  return out


def get_config(arg=None):
  return common.config(parse(arg).small)


def get_hyper(h, arg=None):
  points = [p for b in plans(arg) for p in grid.points(h, b)]
  return [p for seed in range(parse(arg).seeds) for p in seeded(points, seed)]
