r"""Staged upcycling against one jump, at equal total tokens (seed 000's
experiments grow once; its conclusion proposes dense -> moderate MoE by
sparse upcycling, then expert upcycling step by step, untested there).

  python -m experiments.launch --config=experiments/seed000/staged.py --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=staged --workdir=DIR
  python -m moe_jax.lineage DIR/s0_staged          # the chain of one arm

The main job's model and schedule (configs/quickstart.py: T = `steps` =
2250, WSD, E = 8 experts of its width, top-2). Every transition is in the
run (the schedule and optimizer state go on), at t_k = k T / 6 (375, 750 and
1125 at T = 2250), and every arm ends at 4E = 32 experts after T steps, so
each reads the same T x batch tokens (not the same FLOPs: a dense step is
cheaper). Per seed s (config.seed: init and data order):
  s{s}_dense_e      dense until t1, then E copies of its MLP (dense_to_moe), to T
  s{s}_dense_e_2e   dense_e's state at t2 grown to 2E (expand_experts), to T
  s{s}_staged       dense_e_2e's state at t3 grown to 4E: dense -> E -> 2E -> 4E
  s{s}_dense_4e     dense until t1, then 4E copies at once (one jump)
  s{s}_fixed_e      E experts from scratch, to T
  s{s}_e_4e         fixed_e's state at t1 grown to 4E (expand_experts x4: one jump)
The first two stages of the staged arm are arms of their own (ending at E
and at 2E experts). Copies are seed 000's uniform duplication with its
router-bias noise (expand_experts' defaults) and seed 001's dense_to_moe.
`:small` is CI's few steps of a tiny model, one seed.
"""
from configs import common, quickstart

ARMS = ('dense_e', 'dense_e_2e', 'staged', 'dense_4e', 'fixed_e', 'e_4e')
FINAL = ('staged', 'dense_4e', 'e_4e')   # the arms that end at 4E


def _arg(arg):
  a = common.parse_arg(arg, steps=2250, seeds=3, small=False)
  if a.small:
    a.update(steps=12, seeds=1)
  return a


def transitions(arg=None):
  """(t1, t2, t3): k T / 6."""
  steps = _arg(arg).steps
  return tuple(k * steps // 6 for k in (1, 2, 3))


def get_config(arg=None):
  a = _arg(arg)
  config = quickstart.get_config(f'steps={a.steps}' + (',small' if a.small else ''))
  every = transitions(arg)[0]
  config.update(total_steps=a.steps, checkpoint_every_steps=every)
  config.ckpt.keep_every = every   # the stages start from each other's t_k
  return config


def _grow(step, recipe, experts, factor=2):
  """The overrides of an in-run transition at `step` to `experts` experts."""
  return {'config.upcycle.step': step, 'config.upcycle.recipe': recipe,
          'config.upcycle.factor': factor, 'config.upcycle.target.moe.num_experts': experts}


def stitched(arm, arg=None):
  """[(run, last step)] whose metrics make `arm`'s whole curve: each run up
  to the step the next one branched from it (None: to the end)."""
  t1, t2, t3 = transitions(arg)
  chain = {'dense_e_2e': (('dense_e', t2),), 'staged': (('dense_e', t2), ('dense_e_2e', t3)),
           'e_4e': (('fixed_e', t1),)}
  return chain.get(arm, ()) + ((arm, None),)


def get_hyper(h, arg=None):
  a = _arg(arg)
  e = get_config(arg).moe.num_experts
  t1, t2, t3 = transitions(arg)
  points = []
  for s in range(a.seeds):
    run = lambda arm: f's{s}_{arm}'
    arms = {
        'dense_e': {'config.moe.num_experts': 0, **_grow(t1, 'dense_to_moe', e)},
        'dense_e_2e': {'resume_from': h.run(run('dense_e'), step=t2),
                       **_grow(t2, 'expand_experts', 2 * e)},
        'staged': {'resume_from': h.run(run('dense_e_2e'), step=t3),
                   'config.moe.num_experts': 2 * e, **_grow(t3, 'expand_experts', 4 * e)},
        'dense_4e': {'config.moe.num_experts': 0, **_grow(t1, 'dense_to_moe', 4 * e)},
        'fixed_e': {},
        'e_4e': {'resume_from': h.run(run('fixed_e'), step=t1),
                 **_grow(t1, 'expand_experts', 4 * e, factor=4)},
    }
    points += [dict(name=run(arm), **{'config.seed': s}, **arms[arm]) for arm in ARMS]
  return points
