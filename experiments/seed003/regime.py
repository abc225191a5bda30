r"""Seed 003 in its own regime: grow a trained, not annealed base x2 and train the
grown model at least as long as the base, against a model of the grown size
trained from scratch on the same total tokens (issue 36).

  python -m experiments.launch --config=experiments/seed003/regime.py \
      --workdir=DIR --parallel=2
  python -m experiments.report --workdir=DIR --by=name

Per seed s (config.seed; each seed has its own base):
  base_s{s}               the `full` model (experiments/seed003/common.py), BASE
                          steps: warmup, then a constant LR, no decay (the stable
                          phase seed 003 grows from)
  {arm}_{n}_s{s}          base_s{s} at BASE grown x2 by arm, trained n in MORE
                          more steps: a short warmup (fresh optimizer), the
                          constant LR, a linear decay over the last DECAY of the
                          run. The longest n is one run; a shorter n is its
                          branch: the long run's stable state at n - decay,
                          decayed over its own last steps (seed 002's reuse)
      arms: stack, interpose (depth x2, seed 003 eqs. 1-2), width_a0 and
      width_a0.01 (experts and top-k x2, noise alpha sigma, §3.2)
  scratch_{depth,width}_{BASE+n}_s{s}
                          the depth-grown / width-grown model from random init,
                          BASE + n steps (the same total tokens), same schedule
  depth_width_s{s}        §5's sequential growth: interpose's long run at its
                          stable step MORE[0], grown in width (alpha 0.01),
                          trained MORE[0] steps with the decay
  width_depth_s{s}        the other order: width_a0.01's long run at MORE[0],
                          grown by interposition, MORE[0] steps
  scratch_both_s{s}       the model both orders end at (2x layers, 2x experts),
                          from random init, BASE + 2 MORE[0] steps
What it answers: interposition against stacking from a trained base (Fig.
3); growth against scratch at equal total tokens, which is not the seed's
axis (Figs. 7-8 fix the additional budget or the total FLOPs; at equal
tokens scratch spends 20-33 % more FLOPs); alpha 0.01 against 0 in width on
LM loss, where the seed finds the loss similar and the gain downstream; and
depth -> width against width -> depth, which the seed does not claim. `:small` is CI's variant (the
`small` plan, a few steps, one seed).
"""
import math

from experiments.seed003 import common

SEEDS = 3
BASE = 400
MORE = (400, 800)
DECAY = 0.1          # share of a grown or scratch run in the final linear decay
WARMUP = 10          # grown runs start with a fresh optimizer
SMALL = dict(seeds=1, base=4, more=(4, 8), warmup=1)
ALPHA = common.RETENTION_ALPHA
ARMS = ('stack', 'interpose', 'width_a0', f'width_a{ALPHA:g}')

get_config = common.get_config


def budget(arg=None):
  """dict(seeds, base, more, warmup) of the full sweep or of `:small`."""
  return common.budget(arg, dict(seeds=SEEDS, base=BASE, more=MORE, warmup=WARMUP), SMALL)


def decay_steps(total):
  return max(1, round(DECAY * total))


def schedule(total, warmup):
  """The WSD keys of a run of `total` steps: its own warmup, a constant LR, a
  linear decay over its last decay_steps(total) (shared with equal_flops.py)."""
  return {'config.total_steps': total, 'config.opt.schedule': 'wsd',
          'config.opt.warmup_steps': warmup, 'config.opt.decay_fraction': decay_steps(total) / total}


def _grown_keys(p, depth, width):
  keys = {}
  if depth:
    keys['config.model.num_layers'] = 2 * p.layers
  if width:
    keys.update({'config.moe.num_experts': 2 * p.experts, 'config.moe.top_k': 2 * p.top_k})
  return keys


def _growth(p, arm):
  """(upcycle config, model keys of the grown size) of an arm."""
  if arm in ('stack', 'interpose'):
    return f'{common.DEPTH_CONFIG}:method={arm}', _grown_keys(p, True, False)
  return f'{common.WIDTH_CONFIG}:alpha={float(arm[len("width_a"):])}', _grown_keys(p, False, True)


def _family(h, name, totals, warmup, keep_at, start, keys):
  """A long run of max(totals) steps and a decay branch for each shorter total.
  `keep_at`: more stable-phase steps to keep a checkpoint at (a later growth)."""
  longest = max(totals)
  starts = [t - decay_steps(t) for t in totals if t != longest] + list(keep_at)
  every = math.gcd(*starts, longest)
  out = [dict(name=name(longest), **start, **keys, **schedule(longest, warmup),
              **{'config.checkpoint_every_steps': every, 'config.ckpt.keep_every': every})]
  for t in sorted(totals):
    if t != longest:
      out.append(dict(name=name(t), resume_from=h.run(name(longest), step=t - decay_steps(t)),
                      **keys, **schedule(t, warmup),
                      **{'config.checkpoint_every_steps': t, 'config.ckpt.keep_every': 0}))
  return out


def seed_points(h, p, b, s):
  base = f'base_s{s}'
  seed = {'config.seed': s}
  out = [dict(name=base, **seed, **{'config.total_steps': b['base'],
                                    'config.opt.schedule': 'constant',
                                    'config.opt.warmup_steps': p.warmup,
                                    'config.checkpoint_every_steps': b['base']})]
  first = b['more'][0]
  for arm in ARMS:
    recipe, keys = _growth(p, arm)
    start = {'upcycle.config': recipe, 'upcycle.src': h.run(base, step=b['base'])}
    out += _family(h, lambda n, arm=arm: f'{arm}_{n}_s{s}', b['more'], b['warmup'],
                   (first,), start, dict(seed, **keys))
  for kind, keys in (('depth', _grown_keys(p, True, False)), ('width', _grown_keys(p, False, True))):
    out += _family(h, lambda n, kind=kind: f'scratch_{kind}_{n}_s{s}',
                   [b['base'] + n for n in b['more']], p.warmup, (), {}, dict(seed, **keys))
  both = _grown_keys(p, True, True)
  longest = max(b['more'])
  for name, src, second in ((f'depth_width_s{s}', f'interpose_{longest}_s{s}', f'width_a{ALPHA:g}'),
                            (f'width_depth_s{s}', f'width_a{ALPHA:g}_{longest}_s{s}', 'interpose')):
    recipe, _ = _growth(p, second)
    out.append(dict(name=name, **{'upcycle.config': recipe, 'upcycle.src': h.run(src, step=first)},
                    **seed, **both, **schedule(first, b['warmup']),
                    **{'config.checkpoint_every_steps': first}))
  total = b['base'] + 2 * first
  out.append(dict(name=f'scratch_both_s{s}', **seed, **both, **schedule(total, p.warmup),
                  **{'config.checkpoint_every_steps': total}))
  return out


def get_hyper(h, arg=None):
  p, b = common.plan(arg), budget(arg)
  return [point for s in range(b['seeds']) for point in seed_points(h, p, b, s)]
