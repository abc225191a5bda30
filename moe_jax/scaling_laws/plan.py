"""Should I upcycle this checkpoint, to what, when, and for how long?

`plan(source, targets, budget, laws)` prices and predicts the options a
checkpoint has, side by side, within one budget (tokens, training FLOPs or
device-hours; every option spends all of it):
  keep        train the source on
  sparse_Ex   dense -> E experts (seed 001), predicted by the upcycled law
  expert_xm   E -> mE experts, top-k fixed (seed 000)
  scratch_Ex  the grown model trained from scratch (no sunk cost to reuse)
Each option gets its tokens (budget / cost per token), steps, device-hours
(seconds per step, measured where a run of that model exists, else the
source's scaled by FLOPs per token: a compute-bound estimate that seed 000's
s_mE ~ 1.9 s_E at equal FLOPs shows can be far off), training FLOPs (3 x the
forward FLOPs per token, seed 000 Table 6(b)), and a predicted final loss from
the laws (laws.py) with its uncertainty, marked where the law extrapolates.

Losses are printed only where they are calibrated to the source's own corpus
and tokenizer: the law that predicts "keep" must predict the source's own
measured val_loss (the last one logged at or before its step) within
CALIBRATION_NATS (or the law's own interval, if wider). A law from other
units or data (seed 002's, 4.77 nats for a byte-level model at 1.95) is not
evidence of any option's loss, so then every loss is withheld and the plan
says why; `calibration` in the result says which it was.

Recommendations:
  * by the law: the lowest predicted loss; a tie when two options differ by
    less than their combined uncertainty; none when any prediction lies more
    than laws.FAR times outside the law's data ("it refuses to pretend").
  * sparse upcycling, when (tau): the split of the budget between more dense
    training and upcycled training that the upcycled law prefers; and the D2
    beyond which a MoE from scratch on the same new tokens wins (seed 002
    eq. 13 solved at D1 = the source's tokens instead of D1 = D2).
  * expert upcycling (no seed gives a law for E -> mE; a fit of your own runs
    with source_experts > 0 does): seed 000's recipe. CPT of at least half the
    source's pre-training tokens (sec. 5.3.1, Table 3(b): gap closure eta 84%
    at 50%, 98% at 100%, 35% at 10%), so tau is the latest transition that
    keeps CPT >= 50% within the budget (tau ~ 2/3 T, sec. 3.1); and the cost
    against the grown model from scratch at matched tokens (eqs. 1-2). m = 2
    is the ratio seed 000 tested; larger m widens its capacity gap (Term I).
"""
import dataclasses
import re

import numpy as np
from scipy import optimize

from moe_jax.errors import ConfigError
from moe_jax.model_name import describe
from moe_jax.scaling_laws import cost
from moe_jax.scaling_laws import laws as laws_lib

# Seed 000 Table 3(b): CPT / pre-training tokens -> gap closure eta (10-layer
# interleaved MoE, 32 -> 64 experts, tau = 50K steps; CPT 5K ... 51K steps).
SEED000_ETA = ((0.10, 0.347), (0.26, 0.640), (0.50, 0.843), (0.76, 0.885), (1.02, 0.980))
# Its source models: 154M (abstract) to 7.64B total parameters (its 20-layer
# model, configs/lm_moe.py:20layer, by our count).
SEED000_SIZES = (1.54e8, 7.64e9)
CPT_FRACTION = 0.5                # sec. 5.3.1: "at least 50% CPT is needed"
CALIBRATION_NATS = 0.05           # a law's miss at the source beyond this: not this corpus
UNITS = {'tokens': 'tokens', 'flops': 'FLOPs', 'gpuh': 'device-hours'}


@dataclasses.dataclass(frozen=True)
class Budget:
  value: float
  unit: str          # tokens | flops | gpuh

  def __str__(self):
    return f'{self.value:.4g} {UNITS[self.unit]}'


def parse_budget(text):
  """'2e9tokens', '1e18flops', '120gpuh' (device-hours) -> Budget."""
  m = re.fullmatch(r'\s*([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*(tokens|flops|gpuh)\s*', text or '')
  if not m:
    raise ConfigError(f'--budget={text!r}: expected a number and a unit, e.g. 2e9tokens, '
                      '1e18flops or 120gpuh (device-hours)')
  value = float(m.group(1))
  if not np.isfinite(value) or value <= 0:
    raise ConfigError(f'--budget={text!r} must be > 0')
  return Budget(value, m.group(2))


def _eta(fraction):
  xs, ys = zip(*SEED000_ETA)
  return float(np.interp(fraction, xs, ys))


def _options(source, targets):
  keep = dict(name='keep', how='keep', model=source['model'],
              seconds=source.get('seconds_per_step'), measured=True)
  out = [keep]
  for t in targets:
    grown = dict(model=t['model'], seconds=t.get('seconds_per_step'),
                 measured=t.get('seconds_per_step') is not None)
    out.append(dict(grown, name=t['name'], how=t['how']))
    # scratch_8x, or scratch_8x_g4_shared beside fine_8x_g4_shared (whose 32
    # experts a G = 1 option may also have).
    fine = t['name'].startswith('fine_')
    shape = t['name'][len('fine_'):] if fine else f'{t["model"]["num_experts"]}x'
    out.append(dict(grown, name=f'scratch_{shape}', how='scratch'))
  if keep['seconds'] is not None:     # unmeasured: scaled by FLOPs per token
    for o in out:
      if o['seconds'] is None:
        o['seconds'] = keep['seconds'] * (o['model']['flops_per_token']
                                          / source['model']['flops_per_token'])
  return out


def _per_token(o, budget, tokens_per_step, devices):
  """The budget one token of option `o` costs."""
  if budget.unit == 'tokens':
    return 1.0
  if budget.unit == 'flops':
    return 3.0 * o['model']['flops_per_token']
  if o['seconds'] is None:
    raise ConfigError(f'a budget in device-hours needs seconds per step: none measured for '
                      f'{o["name"]} (no tokens_per_s in metrics.jsonl): pass --step_time')
  return o['seconds'] * devices / 3600.0 / tokens_per_step


def _prediction(o, source, laws):
  """(role, point, shape) the laws predict option `o` with, or None."""
  n1, d0, m = source['model']['dense_nonembed'], source['tokens'], o['model']
  shape = dict(n_expert=m['num_experts'], top_k=m['top_k'])
  if o['how'] == 'keep':
    return ('moe', {'N1': n1, 'D1': d0 + o['tokens']}, shape) if m['num_experts'] else (
        'dense', {'N1': n1, 'D1': d0 + o['tokens']}, None)
  if o['how'] == 'scratch':
    return 'moe', {'N1': n1, 'D1': o['tokens']}, shape
  src_e, law = source['model']['num_experts'], laws.get('upcycled')
  if not law or any((e > 0) != (src_e > 0) for e in law.domain.get('source_experts', [0])):
    return None   # a dense -> MoE law says nothing of E -> mE, nor the reverse
  return 'upcycled', {'N1': n1, 'D1': d0, 'D2': o['tokens']}, dict(shape, source_experts=src_e)


def _predict(o, source, laws):
  found = _prediction(o, source, laws)
  if found is None or found[0] not in laws:
    o.update(loss=None, lo=None, hi=None, flags=[], far=False, law=None)
    return
  role, point, shape = found
  law = laws[role]
  o['loss'], o['lo'], o['hi'] = law.predict(point)
  flags = law.flags(point, shape)
  o.update(law=role, flags=[text for _, text in flags], far=any(far for far, _ in flags))


def _calibration(keep, source, laws):
  """dict(status='calibrated' | 'withheld', text, law_at_source, measured):
  whether the law predicting `keep` predicts the source's measured val_loss."""
  found = _prediction(dict(keep, tokens=0.0), source, laws)
  measured, at = source.get('val_loss'), source.get('val_step', source['step'])
  if found is None or found[0] not in laws:
    return dict(status='withheld', law_at_source=None, measured=measured,
                text='no law predicts the source itself, so none can be checked against it')
  role, point, _ = found
  law = laws[role]
  predicted, lo, hi = law.predict(point)
  out = dict(law_at_source=predicted, measured=measured)
  name = law.origin or f'the {role} law'
  if measured is None:
    return dict(out, status='withheld', text=(
        f'the source logged no val_loss by step {source["step"]}, so {name} (which predicts '
        f'{predicted:.4f} nats there) cannot be checked against its corpus and tokenizer: '
        'evaluate it (eval_every_steps), or pass a law fitted to runs on this corpus (--law)'))
  tolerance = max(CALIBRATION_NATS, 0.0 if lo is None else (hi - lo) / 2)
  said = (f'{name} predicts {predicted:.4f} nats at the source, which measured '
          f'{measured:.4f} (val_loss at step {at})')
  if abs(predicted - measured) > tolerance:
    return dict(out, status='withheld', text=(
        f'{said}: the law is in other units or fitted to other data (corpus, tokenizer), so '
        'its losses are not printed; fit one to runs on this corpus (python -m '
        'moe_jax.scaling_laws collect ..., fit --out=fit.json) and pass --law=fit.json'))
  return dict(out, status='calibrated', text=f'{said}, within {tolerance:.3f} nats')


def _crossing(laws, n1, d0):
  """The D2 beyond which a MoE from scratch on D2 tokens beats upcycling the
  source (seed 002 eq. 13 at D1 = d0), or None."""
  moe, upc = laws.get('moe'), laws.get('upcycled')
  if not (moe and upc and moe.form == 'chinchilla' and upc.form == 'joint'):
    return None
  gap = lambda log_d: (moe.predict({'N1': n1, 'D1': np.exp(log_d)})[0]
                       - upc.predict({'N1': n1, 'D1': d0, 'D2': np.exp(log_d)})[0])
  grid = np.linspace(np.log(1e3), np.log(1e16), 300)
  g = np.array([gap(x) for x in grid])
  up = np.flatnonzero((g[:-1] > 0) & (g[1:] <= 0))
  return float(np.exp(optimize.brentq(gap, grid[up[0]], grid[up[0] + 1]))) if up.size else None


def _sparse_timing(o, keep, source, laws):
  """When to upcycle a dense source: the split of the budget between more
  dense training (x tokens) and upcycled training that the upcycled law
  prefers, on a grid of tenths."""
  law, n1, d0 = laws.get('upcycled'), source['model']['dense_nonembed'], source['tokens']
  best = 0.0
  if law and o['loss'] is not None and not o['far']:
    loss = lambda f: law.predict({'N1': n1, 'D1': d0 + f * keep['tokens'],
                                  'D2': (1 - f) * o['tokens']})[0]
    best = min(np.linspace(0.0, 0.9, 10), key=loss)
  x = best * keep['tokens']
  o.update(tau_step=source['step'] + x / source['tokens_per_step'], tau_now=not best,
           cpt=(1 - best) * o['tokens'])
  # A law withheld at the source (plan()) is no evidence of D* either.
  o['crossing'] = _crossing(laws, n1, d0) if o['loss'] is not None else None


def _expert_timing(o, keep, source, budget, devices, cpt_fraction):
  """Seed 000's recipe: the latest tau that keeps CPT >= cpt_fraction of all
  tokens before it, within the budget; its eta and eqs. 1-2 costs."""
  d0, tps, r = source['tokens'], source['tokens_per_step'], cpt_fraction
  c_keep, c_grow = budget.value / keep['tokens'], budget.value / o['tokens']
  x = (budget.value - r * c_grow * d0) / (c_keep + r * c_grow)
  x = x if x >= tps else 0.0    # less than a step more: upcycle now
  cpt = (budget.value - c_keep * x) / c_grow
  o.update(tau_step=source['step'] + x / tps, tau_now=not x, cpt=cpt,
           cpt_fraction=cpt / (d0 + x), eta=_eta(cpt / (d0 + x)))
  if keep['seconds'] and o['seconds']:
    tau = o['tau_step']
    o['eqs_1_2'] = cost.upcycling_cost(keep['seconds'], o['seconds'], tau + cpt / tps, tau,
                                       devices)


def _uncertainty(a, b):
  half = lambda o: 0.0 if o['lo'] is None else (o['hi'] - o['lo']) / 2
  return float(np.hypot(half(a), half(b)))


def _verdict(options, source, cpt_fraction, calibration):
  """(option name or None, reason)."""
  predicted = sorted((o for o in options if o['loss'] is not None), key=lambda o: o['loss'])
  far = [o for o in predicted if o['far']]
  experts = [o for o in options if o['how'] == 'expert']
  if experts and all(o['loss'] is None for o in experts):
    best = experts[0]
    if best['cpt_fraction'] >= cpt_fraction * (1 - 1e-9):
      name, reason = best['name'], (
          f'seed 000 recipe: CPT = {best["cpt_fraction"]:.0%} of the tokens before tau (>= '
          f'{cpt_fraction:.0%}; Table 3(b) eta ~ {best["eta"]:.0%}), cheaper than '
          f'{best["model"]["num_experts"]} experts from scratch (eqs. 1-2)')
    else:
      name, reason = 'keep', (
          f'seed 000 recipe: the budget buys CPT of {best["cpt_fraction"]:.0%} of the tokens '
          f'seen, below {cpt_fraction:.0%} (Table 3(b) eta ~ {best["eta"]:.0%}); upcycle with '
          f'a budget of >= {cpt_fraction:.0%} of them')
    scale, (lo, hi) = source['model']['params'], SEED000_SIZES
    if lo <= scale <= hi:
      return name, reason
    factor = lo / scale if scale < lo else scale / hi
    where = (f'seed 000 measured its recipe on sources of {_g(lo)}-{_g(hi)} parameters; this '
             f'one has {_g(scale)} ({factor:.3g}x outside)')
    if factor > laws_lib.FAR:
      return None, f'{where}: not evidence here (the recipe would say: {name}, {reason})'
    return name, f'{reason}; {where}'
  if not predicted:
    if calibration['status'] == 'withheld':
      return None, f'loss predictions withheld: {calibration["text"]}'
    return None, 'no law predicts these options'
  if far:
    return None, (f'the laws were fitted on runs unlike this source ({far[0]["flags"][0]}); '
                  'their numbers are extrapolations, not evidence: fit a law to runs of your '
                  'own scale (docs/planner.md)')
  best = predicted[0]
  if len(predicted) > 1:
    second = predicted[1]
    margin = _uncertainty(best, second)
    if second['loss'] - best['loss'] <= margin:
      return best['name'], (f'{best["name"]} and {second["name"]} tie within the laws\' '
                            f'uncertainty ({second["loss"] - best["loss"]:.4f} <= {margin:.4f} '
                            'nats)')
  return best['name'], f'lowest predicted loss ({best["loss"]:.4f} nats)'


def plan(source, targets, budget, laws, devices=1, cpt_fraction=CPT_FRACTION):
  """The options for `source` within `budget`, their predictions and costs,
  and a recommendation.

  source   dict(model=summary (run.json), tokens=tokens seen at step (all
           stages), tokens_per_step, step, seconds_per_step or None,
           val_loss and val_step: its last measured val_loss, or None)
  targets  [dict(name, how='sparse' | 'expert', model=summary,
           seconds_per_step=measured or None)]
  laws     {role: laws.Law} (laws.default() or laws.load(path))
  """
  if source['tokens'] is None or source['tokens'] < 0:
    raise ConfigError('the tokens the source has seen are unknown: pass --tokens')
  tps = source['tokens_per_step']
  options = _options(source, targets)
  for o in options:
    o['tokens'] = budget.value / _per_token(o, budget, tps, devices)
    o['steps'] = o['tokens'] / tps
    o['hours'] = None if o['seconds'] is None else o['steps'] * o['seconds'] * devices / 3600
    o['flops'] = 3.0 * o['model']['flops_per_token'] * o['tokens']
    _predict(o, source, laws)
  keep = options[0]
  calibration = _calibration(keep, source, laws)
  if calibration['status'] == 'withheld':
    for o in options:
      o.update(loss=None, lo=None, hi=None, flags=[], far=False, law=None)
  for o in options:
    if o['how'] == 'sparse':
      _sparse_timing(o, keep, source, laws)
    elif o['how'] == 'expert':
      _expert_timing(o, keep, source, budget, devices, cpt_fraction)
  name, reason = _verdict(options, source, cpt_fraction, calibration)
  return dict(source=source, budget=budget, devices=devices, options=options,
              recommendation=name, reason=reason, calibration=calibration)


def _g(x):
  """3 significant digits, with K / M / B / T below 1e15."""
  if x is None:
    return '-'
  for unit, scale in (('T', 1e12), ('B', 1e9), ('M', 1e6), ('K', 1e3)):
    if 1e15 > abs(x) >= scale:
      return f'{x / scale:.3g}{unit}'
  return f'{x:.3g}'


def _timing(o):
  if 'tau_step' not in o:
    return ''
  when = 'now' if o['tau_now'] else f'step {o["tau_step"]:.0f}'
  text = f'tau={when}, CPT {_g(o["cpt"])} tok'
  if 'eta' in o:
    text += f' ({o["cpt_fraction"]:.0%}, eta~{o["eta"]:.0%})'
  return text


def table(result):
  """The plan as text: a header, one row per option, the recommendation and
  the caveats."""
  s = result['source']
  rows = [('option', 'model', 'params', 'active', 'tokens', 'steps', 'dev-hours', 'FLOPs',
           'loss (range)', 'tau / CPT')]
  flags, notes = {}, []
  for o in result['options']:
    loss = '-' if o['loss'] is None else f'{o["loss"]:.4f}' + (
        f' [{o["lo"]:.4f}, {o["hi"]:.4f}]' if o['lo'] is not None else '') + (
        '*' if o['flags'] else '')
    hours = _g(o['hours']) + ('' if o['measured'] or o['hours'] is None else ' est')
    rows.append((o['name'], describe(o['model']), _g(o['model']['params']),
                 _g(o['model']['params_active']), _g(o['tokens']), _g(o['steps']), hours,
                 _g(o['flops']), loss, _timing(o)))
    for flag in o['flags']:
      flags.setdefault(flag, []).append(o['name'])
    if o.get('crossing'):
      notes.append(f'{o["name"]}: a MoE from scratch on the same new tokens wins beyond '
                   f'D2 = {o["crossing"]:.3g} (seed 002 eq. 13 at D1 = {s["tokens"]:.3g})')
    if o.get('eqs_1_2'):
      c = o['eqs_1_2']
      notes.append(f'{o["name"]}: to {o["model"]["num_experts"]} experts at matched tokens '
                   f'(seed 000 eqs. 1-2): from scratch {c["C_fs"]:.4g} dev-h, upcycled '
                   f'{c["C_up"]:.4g} (saves {c["saving_fraction"]:.0%}), {c["C_up_sunk"]:.4g} '
                   f'with the source sunk (saves {c["sunk_saving_fraction"]:.0%})')
    if o['how'] == 'expert' and o['loss'] is None:
      notes.append(f'{o["name"]}: no law for E -> mE (seed 002\'s is dense -> MoE); fit one to '
                   'your own expert-upcycled runs to get a loss')
  notes += [f'{", ".join(names)}: {flag}' for flag, names in flags.items()]
  if any(not o['measured'] and o['seconds'] is not None for o in result['options']):
    notes.append('est: seconds per step scaled from the source by FLOPs per token (compute-'
                 'bound; seed 000 measured 1.9x for 2x experts at equal FLOPs): pass '
                 '--step_time or --measured')
  width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
  lines = ['  '.join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in rows]
  head = (f'source  {s["workdir"]} at step {s["step"]}: {describe(s["model"])}, '
          f'{_g(s["model"]["params"])} params, N1={_g(s["model"]["dense_nonembed"])}, '
          f'{_g(s["tokens"])} tokens seen, {_g(s.get("seconds_per_step"))} s/step on '
          f'{result["devices"]} device(s)\nbudget  {result["budget"]}\n'
          f'losses  {result["calibration"]["status"]}: {result["calibration"]["text"]}\n')
  verdict = f'\nrecommendation: {result["recommendation"] or "none"}: {result["reason"]}'
  return head + '\n'.join(lines) + verdict + ''.join(f'\n  * {n}' for n in notes) + '\n'
