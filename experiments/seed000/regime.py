r"""The regime study (issue 22): where on 2 CPU cores does Fixed-2E beat Fixed-E?

  python -m experiments.launch --config=experiments/seed000/regime.py:setting=w64e8 \
      --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=regime --workdir=DIR --arg=setting=w64e8

One setting per sweep: for each seed, Fixed-E and Fixed-2E trained `steps`
steps on configs/quickstart.py's model with the setting's changes, and WSD
decay branches of both at each budget T in `at` (their state at 0.8 T decayed
over the last 0.2 T, so a branch is the run one would train to T; seed 002's
checkpoint reuse). One seed fixes init and data order: both arms of a seed
read the same batches, so val(Fixed-E) - val(Fixed-2E) is a paired gap.
The criterion: the gap is > 0 in every one of >= 3 seeds and its mean exceeds
twice its standard error.

Settings (E -> 2E experts of width W, top-k; d_model 96 unless said):
  w64e8     W=64, 8 -> 16, top-2 (the quickstart's model)
  w32e16    W=32, 16 -> 32, top-2
  w64e8k1   W=64, 8 -> 16, top-1
  w128e4    W=128, 4 -> 8, top-2 (coarse experts)
  d64w64e8  d_model 64 (4 heads of 16), W=64, 8 -> 16, top-2
`dispatch=NAME` picks moe.dispatch (all dropless paths compute the same
function; only their speed differs). `:small` is a seconds-long CI variant.
"""
from configs import quickstart
from experiments.seed000 import base

SETTINGS = {
    'w64e8': dict(width=64, experts=8, top_k=2),
    'w32e16': dict(width=32, experts=16, top_k=2),
    'w64e8k1': dict(width=64, experts=8, top_k=1),
    'w128e4': dict(width=128, experts=4, top_k=2),
    'd64w64e8': dict(width=64, experts=8, top_k=2, d_model=64),
}


def _arg(arg):
  a = base.parse(arg, setting='w64e8', steps=1600, at='800+1200', dispatch='')
  if a.setting not in SETTINGS:
    raise ValueError(f'setting={a.setting!r} is not one of {sorted(SETTINGS)}')
  if a.small:
    a.update(steps=20, at='10', seeds=1)
  return a


def budgets(a):
  return sorted({int(t) for t in a.at.split('+') if t} | {a.steps})


def runs(arg=None):
  """{(seed, T): (Fixed-E run, Fixed-2E run)}."""
  a = _arg(arg)
  e = SETTINGS[a.setting]['experts']
  out = {}
  for s in range(a.seeds):
    for t in budgets(a):
      suffix = '' if t == a.steps else f'_T={t}'
      out[(s, t)] = (f'e{e}_s{s}{suffix}', f'e{2 * e}_s{s}{suffix}')
  return out


def get_config(arg=None):
  a = _arg(arg)
  s = SETTINGS[a.setting]
  config = quickstart.get_config(
      'small' if a.small else f'steps={a.steps},experts={s["experts"]},width={s["width"]}')
  config.moe.top_k = s['top_k']
  config.moe.dispatch = a.dispatch or config.moe.dispatch   # the same function, other speed
  if 'd_model' in s:
    config.model.update(d_model=s['d_model'], head_dim=s['d_model'] // config.model.num_heads)
  unit = 4 if a.small else 40   # branch points (0.8 T) are multiples of it
  config.update(checkpoint_every_steps=unit, eval_every_steps=a.steps // 4)
  config.ckpt.keep_every = unit
  return config


def get_hyper(h, arg=None):
  a = _arg(arg)
  e = get_config(arg).moe.num_experts
  points = []
  for (seed, t), names in runs(arg).items():
    for name, experts in zip(names, (e, 2 * e)):
      point = {'name': name, 'config.seed': seed, 'config.moe.num_experts': experts}
      if t != a.steps:
        long_run = runs(arg)[(seed, a.steps)][names.index(name)]
        point.update({'resume_from': h.run(long_run, step=round(0.8 * t)),
                      'config.total_steps': t, 'config.ckpt.keep_every': 0})
      points.append(point)
  return points
