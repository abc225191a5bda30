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

`:end` runs the bracket's nearest-to-decided end alone: the largest size
(N1 = 131,392) at D1 = D2 = D = 12,800 steps (13.1M tokens), where three
seeds gave MoE - upcycled -0.0256 [-0.0519, +0.0006] (docs/seed002/
seeds.json). Issue 71's run, its settings fixed here before it was launched:

  python -m experiments.launch --config=experiments/seed002/extend.py:end,seeds=9 \
    --workdir=DIR --parallel=1
  python -m experiments.seed002.report --study=seeds --workdir=DIR

Nine seeds, 0-8, all in the new workdir so that all come from one commit
(the committed seeds 0-2 ran at another). Why nine: the three seeds'
differences have sd 0.0106, and a 95 % t half-width of 0.01 needs n with
t(n-1) 0.0106 / sqrt(n) <= 0.01, n = 7 (2.447 x 0.0106 / 2.646 = 0.0098);
nine (2.306 x 0.0106 / 3 = 0.0081) leave room for a larger sd. 27 runs.
Cost, from seeds.json's wall_s for this size and D (two at a time beside
other jobs): dense ~220 s, upcycled ~410 s, MoE from scratch ~390 s, about
1,020 s a seed, 9,200 s (2.5 hours) of run time.

`:small` is CI's: alone, the grid's CI variant; with `diagonal`,
`bracket` or `end`, the smallest size at D = 10 steps, or 5 and 10
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
  arg = common.parse(arg, diagonal=False, bracket=False, end=False, seeds=1)
  if arg.diagonal + arg.bracket + arg.end > 1:
    raise ValueError('give one of diagonal, bracket, end')
  if arg.seeds < 1:
    raise ValueError(f'seeds={arg.seeds} must be at least 1')
  return arg


def plans(arg=None):
  """The grids (grid.points' budgets) one seed runs: the extension, one
  diagonal per D of `:diagonal` / `:bracket`, or `:end`'s one point."""
  arg = parse(arg)
  if arg.end:
    sizes = grid.SMALL['sizes'] if arg.small else EXTEND['sizes']
    return [diagonal(sizes[-1:], (SMALL_DIAGONAL_D if arg.small else DIAGONAL_D)[0])]
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
