"""Should I upcycle this checkpoint, to what, when and for how long?

  python -m moe_jax.plan --ckpt=DIR --budget=2e9tokens [--law=fit.json]
  python -m moe_jax.plan --memory --config=configs/NAME.py [--device_memory=80GB]

--budget is what you will spend from here on: tokens, training FLOPs
(1e18flops) or device-hours (120gpuh). Prints the options side by side (keep
training; sparse-upcycle a dense source to --experts, fine-grained at each
--granularity and with a --shared expert if asked; expert-upcycle an MoE
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
import json
import math
import sys

from absl import flags

from moe_jax import cli, model_name
from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import laws, plan
from moe_jax.upcycle import options

_SAME = ('num_experts', 'top_k', 'params', 'expert_d_ff', 'num_shared_experts')


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


def build(ckpt, budget, law=(), experts='8', top_k=2, factors='2,4', measured=(),
          step_time=(), devices=None, tokens=None, granularity='1', shared=False):
  """(plan result, source): everything the command prints."""
  budget = plan.parse_budget(budget)
  law_set = laws.default()
  for path in law or []:
    law_set.update(laws.load(path))
  if devices is not None and devices <= 0:
    raise ConfigError(f'--devices={devices} must be > 0')
  if tokens is not None and not (math.isfinite(tokens) and tokens >= 0):
    raise ConfigError(f'--tokens={tokens} must be a finite number >= 0')
  if top_k < 1:
    raise ConfigError(f'--top_k={top_k} must be >= 1')
  source = options.source(ckpt, tokens)
  devices = devices or source['devices'] or 1
  targets = options.targets(ckpt, _ints(experts, 'experts', 2), top_k,
                            _ints(factors, 'factors', 2), _ints(granularity, 'granularity', 1),
                            shared)
  for workdir in measured or []:
    model, seconds = options.measured(workdir, source['tokens_per_step'], devices)
    same = [t for t in [dict(model=source['model'], name='keep')] + targets
            if all(t['model'].get(k) == model.get(k) for k in _SAME
                   if k in t['model'] and k in model)]
    if not same:
      raise ConfigError(f'--measured={workdir}: its model ({model_name.describe(model)}, '
                        f'{model["params"]} params) is none of the options')
    for t in same:
      t['seconds_per_step'] = seconds
    if same[0]['name'] == 'keep':
      source['seconds_per_step'] = seconds
  given = _step_times(step_time, {'keep'} | {t['name'] for t in targets})
  source['seconds_per_step'] = given.get('keep', source['seconds_per_step'])
  for t in targets:
    t['seconds_per_step'] = given.get(t['name'], t.get('seconds_per_step'))
  return plan.plan(source, targets, budget, law_set, devices)


def text(as_json=False, **kwargs):
  """What the command prints: the table, or JSON with `as_json`."""
  result = build(**kwargs)
  if as_json:
    return json.dumps(dict(result, budget=str(result['budget'])), indent=1) + '\n'
  return plan.table(result)


def define_flags(fv=flags.FLAGS):
  """The command's flags, on `fv` (tests parse into their own FlagValues)."""
  flags.DEFINE_string('ckpt', None, 'Workdir (newest checkpoint) or step directory.',
                      required=True, flag_values=fv)
  flags.DEFINE_string('budget', None, 'e.g. 2e9tokens, 1e18flops, 120gpuh.', required=True,
                      flag_values=fv)
  flags.DEFINE_multi_string('law', [], 'Fit JSON from scaling_laws fit --out (repeatable).',
                            flag_values=fv)
  flags.DEFINE_string('experts', '8', 'Dense source: experts to sparse-upcycle to.',
                      flag_values=fv)
  flags.DEFINE_integer('top_k', 2, 'Dense source: top-k of the MoE.', flag_values=fv)
  flags.DEFINE_string('granularity', '1', 'Dense source: granularities G (fine-grained '
                      'upcycling: experts x G experts of width d_ff / G, top-(top_k G)).',
                      flag_values=fv)
  flags.DEFINE_bool('shared', False, 'Dense source: one shared expert beside the routed ones.',
                    flag_values=fv)
  flags.DEFINE_string('factors', '2,4', 'MoE source: expansion factors m.', flag_values=fv)
  flags.DEFINE_multi_string('measured', [], 'Workdir of a grown model: its step time.',
                            flag_values=fv)
  flags.DEFINE_multi_string('step_time', [], 'NAME=SECONDS per step (keep, sparse_8x, '
                            'expert_x2, ...).', flag_values=fv)
  flags.DEFINE_integer('devices', None, 'Devices per step (default: run.json, else 1).',
                       flag_values=fv)
  flags.DEFINE_float('tokens', None, 'Tokens the source has seen (overrides lineage).',
                     flag_values=fv)
  flags.DEFINE_bool('json', False, 'Print JSON instead of the table.', flag_values=fv)


def from_flags(fv=flags.FLAGS):
  """text() of parsed flag values."""
  return text(fv.json, ckpt=fv.ckpt, budget=fv.budget, law=fv.law, experts=fv.experts,
              top_k=fv.top_k, factors=fv.factors, measured=fv.measured,
              step_time=fv.step_time, devices=fv.devices, tokens=fv.tokens,
              granularity=fv.granularity, shared=fv.shared)


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  sys.stdout.write(cli.run_reporting_errors(from_flags))


if __name__ == '__main__':   # flags only here: tests import this module
  if '--memory' in sys.argv[1:]:   # the memory report, flags of its own (moe_jax/plan_memory.py)
    from moe_jax import plan_memory  # pylint: disable=g-import-not-at-top
    cli.run_app(plan_memory.main)
  define_flags()
  cli.run_app(main)
