r"""docs/results.md: per seed, the paper's claims and our verdicts, from one
claims file whose every number is resolved from a committed results file.

  python -m experiments.results_page --results=docs/claims.json

prints the page's generated block (`--summary`: the README's one line per
seed); `python -m experiments.check_docs` rebuilds and compares both. The
file's entries are the seeds (`seed`, `paper`, `page`, `summary`, `claims`)
and reference papers a study grades beside them, which carry a `title`
(`title`). A claim in the claims file reads

  {"claim": what the paper says, "quantity": what we measured (its unit),
   "value": a source, "against": a second source (optional),
   "supports": [low, high] (null: unbounded), "verdict": (optional),
   "scale": the runs' size, "seeds": which seeds, "section": "seed000.md#anchor",
   "note": (optional)}

and a source is one of

  {"quickstart": FILE, "paired": "Fixed-E - Fixed-2E"}   a paired difference of the
                                                        quickstart's summary (t interval)
  {"quickstart": FILE, "eta": true}                      its eta (bootstrap interval)
  {"runs": FILE, "a": "k1_s{s}_sparse_8", "b": "k1_s{s}_up_4", "seeds": [0, 1, 2]}
                                                        final val loss a - b paired by seed
                                                        (a, b: templates, or lists of names;
                                                        "b_runs": FILE: b's runs from another
                                                        file, e.g. another sweep that grew the
                                                        same sources)
  {"json": FILE, "key": "a.b.c"}                         a number, or a dict with an
                                                        estimate (estimate | mean | rho)
                                                        and lo, hi
  {"eval": SWEEP_DIR, "mode": "loglik", "model": "sft", "task": "arc_easy"}
                                                        accuracy, mean over seeds, with
                                                        Wilson's interval at one seed's n
  {"row": "seed001.md", "contains": "router collapses"} the interval a generated table row
                                                        of that page prints (check_docs
                                                        rebuilds the table from its file)

The verdict is computed wherever there is an interval: one value is held
against `supports` (experiments.stats.verdict); a value `against` another
agrees or disagrees only where their intervals are disjoint (`supports`
[0, null] reads value > against). A stated verdict must equal the computed
one (else an error); without an interval it must be stated ('inconclusive',
'not run', or a verdict a note explains), and a claim without a source may
state no decimal number. A claim with "outside": why (its runs lie outside
the paper's setting, e.g. a ratio below the paper's lowest) is inconclusive
whatever its interval says; the column names the interval's verdict.

What a verdict rests on is written in its column, from the data: "(1 seed)"
where `seeds` starts with 1 (it starts with the count of seeds), "(no
interval)" where no interval decides it. `rows` (optional) lists
"page.md: text" of the seed pages' claim rows the claim covers
(experiments.check_docs: every claim row is covered).
"""
import math
import os
import re

from absl import flags

from experiments import quickstart, report, stats
from experiments.moesturizer import table as moesturizer_table
from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.eval import harness
from moe_jax.workdir import files

VERDICTS = ('agrees', 'disagrees', 'inconclusive', 'not run')
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _path(rel):
  path = os.path.join(_REPO, rel)
  if not os.path.exists(path):
    raise ConfigError(f'claims: source {rel} does not exist')
  return path


def resolve(src):
  """dict(estimate, lo, hi) of a source (lo, hi None where it has no interval)."""
  if 'quickstart' in src:
    s = quickstart.read(_path(src['quickstart']))
    ev = quickstart.evidence(s['losses'])
    if src.get('eta'):
      e = ev['eta']
      return dict(estimate=e['estimate'], lo=e.get('lo'), hi=e.get('hi'))
    t = ev['paired'].get(src['paired'])
    if t is None:
      raise ConfigError(f'claims: {src["quickstart"]} has no paired difference '
                        f'{src["paired"]!r} (has: {", ".join(ev["paired"])})')
    return dict(estimate=t['mean'], lo=t['lo'], hi=t['hi'])
  if 'runs' in src:
    names = lambda t: t if isinstance(t, list) else [t.format(s=s) for s in src['seeds']]

    read = lambda file: {r['name']: r for r in report.read_results(_path(file))[0]}
    a_runs = read(src['runs'])
    b_runs = read(src['b_runs']) if 'b_runs' in src else a_runs

    def losses(file, runs, side):
      for n in side:
        if n not in runs or runs[n].get('final_val_loss') is None:
          raise ConfigError(f'claims: {file} has no finished run {n!r}')
      return [runs[n]['final_val_loss'] for n in side]
    a = losses(src['runs'], a_runs, names(src['a']))
    b = losses(src.get('b_runs', src['runs']), b_runs, names(src['b']))
    diffs = [x - y for x, y in zip(a, b)]
    t = stats.paired(diffs)
    return dict(estimate=t['mean'], lo=None if t['n'] < 2 else t['lo'],
                hi=None if t['n'] < 2 else t['hi'])
  if 'json' in src:
    obj = files.read_json(_path(src['json']))
    for k in src['key'].split('.'):
      if not isinstance(obj, dict) or k not in obj:
        raise ConfigError(f'claims: {src["json"]} has no key {src["key"]!r}')
      obj = obj[k]
    if isinstance(obj, (int, float)):
      return dict(estimate=obj, lo=None, hi=None)
    est = next((obj[k] for k in ('estimate', 'mean', 'rho') if k in obj), None)
    return dict(estimate=est, lo=obj.get('lo'), hi=obj.get('hi'))
  if 'eval' in src:
    by_model = moesturizer_table.results(_path(src['eval'])).get(src['mode'], {})
    rs = by_model.get(src['model'], {}).get(src['task'])
    if not rs:
      raise ConfigError(f'claims: {src["eval"]} has no {src["mode"]} result of '
                        f'{src["model"]} on {src["task"]}')
    mean, n = sum(r['accuracy'] for r in rs) / len(rs), rs[0]['n']
    lo, hi = harness.wilson(mean * n, n)
    return dict(estimate=100 * mean, lo=100 * lo, hi=100 * hi, seeds=len(rs))
  if 'row' in src:
    return _row(src['row'], src['contains'])
  raise ConfigError(f'claims: a source names none of quickstart, runs, json, eval, row: {src}')


_INTERVAL = re.compile(r'([+-]?\d+\.\d+) \[95% CI ([+-]?\d+\.\d+), ([+-]?\d+\.\d+)\]')
_GENERATED = re.compile(r'<!-- generated: .*?<!-- end generated -->', re.S)


def _row(page, contains):
  """The first interval of the one generated table row of docs/`page` holding `contains`."""
  with open(_path(os.path.join('docs', page))) as f:
    text = f.read()
  found = [l for b in _GENERATED.findall(text) for l in b.splitlines()
           if l.startswith('|') and contains in l]
  m = _INTERVAL.search(found[0]) if len(found) == 1 else None
  if m is None:
    raise ConfigError(f'claims: {len(found)} generated rows of docs/{page} hold {contains!r} '
                      '(want one, with an interval)')
  estimate, lo, hi = map(float, m.groups())
  return dict(estimate=estimate, lo=lo, hi=hi)


def _bound(x, default):
  return default if x is None else x


def verdict(claim, value, against):
  """The computed verdict, or None where the values have no interval or the
  claim no range (`supports`) to hold them against."""
  if 'supports' not in claim:
    return None
  low, high = (_bound(x, d) for x, d in zip(claim.get('supports', [None, None]),
                                             (-math.inf, math.inf)))
  if value['lo'] is None or (against and against['lo'] is None):
    return None
  if against is None:
    return stats.verdict((value['lo'], value['hi']), low, high)
  if value['lo'] > against['hi']:
    return 'agrees' if low >= 0 else 'disagrees'
  if value['hi'] < against['lo']:
    return 'disagrees' if low >= 0 else 'agrees'
  return 'inconclusive'


def _number(v, digits):
  """Accuracies (digits=1) unsigned, differences signed."""
  return f'{v:.1f}' if digits == 1 else f'{v:+.{digits}f}'


def _ours(claim, value, against):
  digits = claim.get('digits', 4)
  one = lambda v: _number(v['estimate'], digits) + (
      '' if v['lo'] is None else f' [{_number(v["lo"], digits)}, {_number(v["hi"], digits)}]')
  text = f'{claim["quantity"]}: {one(value)}'
  if against:
    text += f' vs {claim["against_label"]}: {one(against)}'
  return text


def seed_count(claim):
  """The claim's number of seeds: `seeds` starts with it (None: '-', not run)."""
  m = re.match(r'\d+', claim['seeds'])
  return int(m.group()) if m else None


def qualifiers(claim, verdict, computed):
  """What the verdict rests on, for its column: ['1 seed', 'no interval', ...]."""
  out = []
  if verdict == 'not run':
    return out
  if seed_count(claim) == 1:
    out.append('1 seed')
  if computed is None:
    out.append('no interval')
  if claim.get('outside'):
    out.append(f'outside the paper\'s setting: {claim["outside"]}; '
               f'the interval alone: {computed}')
  return out


def rows(claims):
  """[(seed entry, [(claim, verdict, its qualifiers, ours)])] with every number
  resolved."""
  out = []
  for seed in claims['seeds']:
    got = []
    for c in seed['claims']:
      if c.get('value') is None:
        computed, ours = None, c.get('ours', '-')
        if re.search(r'\d\.\d', ours):
          raise ConfigError(f'claims: {c["claim"]!r} states a number without a source: '
                            'give it a "value"')
      else:
        value = resolve(c['value'])
        against = resolve(c['against']) if 'against' in c else None
        computed, ours = verdict(c, value, against), _ours(c, value, against)
      stated = c.get('verdict')
      if stated is not None and stated not in VERDICTS:
        raise ConfigError(f'claims: verdict {stated!r} of {c["claim"]!r} is not one of '
                          f'{", ".join(VERDICTS)}')
      if computed and stated and computed != stated and not c.get('outside'):
        raise ConfigError(f'claims: {c["claim"]!r} states {stated!r}, its interval says '
                          f'{computed!r}')
      if c.get('outside') and (computed is None or stated != 'inconclusive'):
        raise ConfigError(f'claims: {c["claim"]!r} lies outside the paper\'s setting: it needs '
                          'an interval and the stated verdict \'inconclusive\'')
      v = stated if c.get('outside') else computed or stated
      if v is None:
        raise ConfigError(f'claims: {c["claim"]!r} has no interval: state its verdict')
      got.append((c, v, qualifiers(c, v, computed), ours))
    out.append((seed, got))
  return out


def title(entry):
  """'Seed 000', or a reference paper's own `title` (a claims entry that is no
  seed: 'He et al., arXiv 2410.07524')."""
  return entry.get('title') or f'Seed {entry["seed"]}'


def from_results(path):
  """The generated block of docs/results.md from a claims file."""
  if not os.path.isfile(path):
    raise ConfigError(f'--results={path} is not a file')
  lines = []
  for seed, got in rows(files.read_json(path)):
    counts = {v: sum(1 for _, x, _, _ in got if x == v) for v in VERDICTS}
    lines += [f'## {title(seed)}: {seed["paper"]}', '',
              f'{seed["summary"]} ({", ".join(f"{n} {v}" for v, n in counts.items() if n)}; '
              f'the page: [{seed["page"]}]({seed["page"]}))', '',
              '| the paper says | our verdict | ours [95 % interval] | scale, seeds | where |',
              '|---|---|---|---|---|']
    for c, v, quals, ours in got:
      said = ', '.join(quals) + ('; ' if quals and c.get('note') else '') + c.get('note', '')
      note = f' ({said})' if said else ''
      lines.append(f'| {c["claim"]} | **{v}**{note} | {ours} | {c["scale"]}; {c["seeds"]} | '
                   f'[section]({c["section"]}) |')
    lines.append('')
  return '\n'.join(lines)


def summary(path):
  """The README's summary from a claims file: one line per seed, its summary
  and its verdicts counted, so the README cannot say more than the claims."""
  if not os.path.isfile(path):
    raise ConfigError(f'--results={path} is not a file')
  lines = []
  for seed, got in rows(files.read_json(path)):
    counts = {v: sum(1 for _, x, _, _ in got if x == v) for v in VERDICTS}
    lines.append(f'- {title(seed)} ({seed["paper"]}): {seed["summary"]} '
                 f'({", ".join(f"{n} {v}" for v, n in counts.items() if n)}).')
  return '\n'.join(lines) + '\n'


def main(argv):
  del argv
  render = summary if flags.FLAGS.summary else from_results
  print(cli.run_reporting_errors(render, flags.FLAGS.results), end='')


if __name__ == '__main__':
  flags.DEFINE_string('results', 'docs/claims.json', 'The claims file.')
  flags.DEFINE_bool('summary', False, "Print the README's summary instead of the page's block.")
  cli.run_app(main)
