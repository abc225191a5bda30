"""Should I upcycle this checkpoint, to what, when and for how long?

  python -m moe_jax.plan --ckpt=DIR --budget=2e9tokens [--law=fit.json]
  python -m moe_jax.plan --memory --config=configs/NAME.py [--device_memory=80GB]

--budget is what you will spend from here on: tokens, training FLOPs
(1e18flops) or device-hours (120gpuh). Prints the options side by side (keep
training; sparse-upcycle a dense source to --experts; expert-upcycle an MoE
source by --factors; the grown model from scratch), each with its tokens,
steps, device-hours, FLOPs, predicted loss and, for upcycling, when (tau) and
for how long (CPT tokens); then a recommendation and its caveats.
docs/planner.md explains the numbers and walks through a real case.

The source's model, tokens seen (over its whole lineage) and seconds per step
(tokens_per_s in metrics.jsonl) come from its workdir. Seconds per step of a
grown model come from --measured=WORKDIR (a run of that model), else
--step_time=NAME=SECONDS, else are the source's scaled by FLOPs (marked est).
Laws: seed 002 Table 2 unless --law gives the output of `python -m
moe_jax.scaling_laws fit --out` (repeatable; later files replace the roles
they fit).
"""
import argparse
import json
import sys

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import laws, plan
from moe_jax.upcycle import options

_SAME = ('num_experts', 'top_k', 'params')


def _ints(text, name, low):
  try:
    values = [int(v) for v in text.split(',') if v]
  except ValueError:
    values = []
  if not values or min(values) < low:
    raise ConfigError(f'--{name}={text!r}: expected comma-separated integers >= {low}')
  return values


def _step_times(items, names):
  out = {}
  for item in items or []:
    name, _, value = item.partition('=')
    try:
      seconds = float(value)
    except ValueError:
      seconds = -1.0
    if name not in names or not seconds > 0:
      raise ConfigError(f'--step_time={item!r}: expected NAME=SECONDS with NAME one of '
                        f'{sorted(names)} and SECONDS > 0')
    out[name] = seconds
  return out


def build(args):
  """(plan result, source): everything the command prints."""
  budget = plan.parse_budget(args.budget)
  law_set = laws.default()
  for path in args.law or []:
    law_set.update(laws.load(path))
  if args.devices is not None and args.devices <= 0:
    raise ConfigError(f'--devices={args.devices} must be > 0')
  if args.tokens is not None and args.tokens < 0:
    raise ConfigError(f'--tokens={args.tokens} must be >= 0')
  source = options.source(args.ckpt, args.tokens)
  devices = args.devices or source['devices'] or 1
  targets = options.targets(args.ckpt, _ints(args.experts, 'experts', 2), args.top_k,
                            _ints(args.factors, 'factors', 2))
  for workdir in args.measured or []:
    model, seconds = options.measured(workdir, source['tokens_per_step'], devices)
    same = [t for t in [dict(model=source['model'], name='keep')] + targets
            if all(t['model'][k] == model[k] for k in _SAME)]
    if not same:
      raise ConfigError(f'--measured={workdir}: its model ({plan.describe(model)}, '
                        f'{model["params"]} params) is none of the options')
    for t in same:
      t['seconds_per_step'] = seconds
    if same[0]['name'] == 'keep':
      source['seconds_per_step'] = seconds
  given = _step_times(args.step_time, {'keep'} | {t['name'] for t in targets})
  source['seconds_per_step'] = given.get('keep', source['seconds_per_step'])
  for t in targets:
    t['seconds_per_step'] = given.get(t['name'], t.get('seconds_per_step'))
  return plan.plan(source, targets, budget, law_set, devices)


def parser():
  p = argparse.ArgumentParser(prog='python -m moe_jax.plan', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--ckpt', required=True, help='workdir (newest checkpoint) or step directory')
  p.add_argument('--budget', required=True, help='e.g. 2e9tokens, 1e18flops, 120gpuh')
  p.add_argument('--law', action='append', help='fit JSON from scaling_laws fit --out')
  p.add_argument('--experts', default='8', help='dense source: experts to sparse-upcycle to')
  p.add_argument('--top_k', type=int, default=2, help='dense source: top-k of the MoE')
  p.add_argument('--factors', default='2,4', help='MoE source: expansion factors m')
  p.add_argument('--measured', action='append', help='workdir of a grown model: its step time')
  p.add_argument('--step_time', action='append', help='NAME=SECONDS per step (keep, sparse_8x, '
                 'expert_x2, ...)')
  p.add_argument('--devices', type=int, help='devices per step (default: run.json, else 1)')
  p.add_argument('--tokens', type=float, help='tokens the source has seen (overrides lineage)')
  p.add_argument('--json', action='store_true', help='print JSON instead of the table')
  return p


def main(argv=None):
  args = parser().parse_args(argv)
  try:
    result = build(args)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  if args.json:
    print(json.dumps(dict(result, budget=str(result['budget'])), indent=1))
  else:
    sys.stdout.write(plan.table(result))
  return 0


if __name__ == '__main__':
  if '--memory' in sys.argv[1:]:   # the memory report, flags of its own (moe_jax/plan_memory.py)
    from moe_jax import cli, plan_memory  # pylint: disable=g-import-not-at-top
    cli.run_app(plan_memory.main)
  sys.exit(main())
