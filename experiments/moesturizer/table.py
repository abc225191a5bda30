r"""Seed 004's table from a launched moesturizer sweep.

  python -m experiments.moesturizer.table --workdir=SWEEP_DIR

Reads every RUN/benchmarks.<i>.jsonl (moe_jax.evaluate's lines) and prints a
markdown table per mode: one row per model (runs `<model>_s<seed>` pooled
over seeds), one column per task, accuracy in %. One seed: the accuracy and
its 95 % interval; several: the mean, Wilson's 95 % interval for it at the n
questions of one seed (every seed answers the same questions, so pooling
them would not narrow it), and the seeds' spread (min-max). Both modes add
the share of the multiple-choice answers each letter got (pooled over tasks
and seeds; loglik: the letter of the choice it picks) and, below the table,
the gold letters' shares: a model that answers one letter to everything
scores that letter's gold share.
Generate mode adds, of the responses whose first line is a choice's text
(sft_mix's choice_letter form), how many wrote the right choice and how
many named that choice's letter (harness.letter_counts' `choice_text`). The
router column is read from the last logged training step (RUN/metrics.jsonl)
of each MoE run whose benchmarks are in (they are written after training,
so a run still training is left out): the routing entropy against ln E
(uniform routing), the load's coefficient of variation and the largest
expert's load share, each averaged over layers and seeds. Nothing is written.
"""
import collections
import glob
import json
import math
import os
import re

from absl import flags

from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.eval import harness

_SEED = re.compile(r'_s\d+$')


def define_flags():
  """The command line; defined only when run as a program, so importing this
  module beside another entry point defines no clashing flags."""
  flags.DEFINE_string('workdir', None, 'A launched moesturizer sweep.')
  flags.mark_flag_as_required('workdir')


def results(sweep_dir):
  """{mode: {model: {task: [result, one per seed]}}}."""
  out = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(
      list)))
  paths = sorted(glob.glob(os.path.join(sweep_dir, '*', 'benchmarks.*.jsonl')))
  if not paths:
    raise ConfigError(f'--workdir={sweep_dir}: no RUN/benchmarks.*.jsonl yet')
  for path in paths:
    model = _SEED.sub('', os.path.basename(os.path.dirname(path)))
    with open(path) as f:
      for line in f:
        r = json.loads(line)
        out[r['mode']][model][r['task']].append(r)
  return out


def router_stats(sweep_dir):
  """{model: (entropy, ln E, cv, max load)} from the last metrics.jsonl row
  with MoE metrics of each `<model>_s<seed>` run whose benchmarks.<i>.jsonl
  are written, averaged over layers and seeds: the runs whose accuracies the
  table shows. A run still training has none, and its last row is not its
  final router."""
  per_model = collections.defaultdict(list)
  for path in sorted(glob.glob(os.path.join(sweep_dir, '*', 'metrics.jsonl'))):
    if not glob.glob(os.path.join(os.path.dirname(path), 'benchmarks.*.jsonl')):
      continue
    last = None
    with open(path) as f:
      for line in f:
        row = json.loads(line)
        if any(k.endswith('/entropy') and k.startswith('moe/') for k in row):
          last = row
    if last is None:
      continue
    layers = sorted({k.split('/')[1] for k in last if k.startswith('moe/') and
                     k.endswith('/entropy')})   # not moe/dispatch/... and the like
    loads = [last[f'moe/{n}/load'] for n in layers]
    mean = lambda xs: sum(xs) / len(xs)
    per_model[_SEED.sub('', os.path.basename(os.path.dirname(path)))].append((
        mean([last[f'moe/{n}/entropy'] for n in layers]), mean([math.log(len(x)) for x in loads]),
        mean([last[f'moe/{n}/cv'] for n in layers]), mean([max(x) for x in loads])))
  return {m: tuple(sum(col) / len(col) for col in zip(*rows)) for m, rows in per_model.items()}


def _router(stats):
  if stats is None:
    return '-'
  entropy, uniform, cv, top = stats
  return f'H {entropy:.3f} / {uniform:.3f}, CV {cv:.2f}, max load {100 * top:.0f} %'


def _cell(rs):
  if len(rs) == 1:
    lo, hi = rs[0]['ci95']
    return f'{100 * rs[0]["accuracy"]:.1f} [{100 * lo:.0f}, {100 * hi:.0f}]'
  accs = [100 * r['accuracy'] for r in rs]
  mean, n = sum(accs) / len(accs), rs[0]['n']
  lo, hi = harness.wilson(mean / 100 * n, n)
  return (f'{mean:.1f} [{100 * lo:.0f}, {100 * hi:.0f}] ({min(accs):.1f}-{max(accs):.1f}, '
          f'{len(rs)} seeds)')


def _letters(rs, key='letters'):
  """'A 25 / B 50 / ...': each letter's share (%) of the multiple-choice
  answers of results `rs` pooled ('-': none read back); '' without counts."""
  counts = collections.Counter()
  for r in rs:
    counts.update(r.get(key) or {})
  total = sum(counts.values())
  return ' / '.join(f'{k} {100 * v / total:.0f}' for k, v in sorted(counts.items())) if total else ''


def _texts(rs):
  """'right / written (letter agrees)' of the responses whose first line is a
  choice's text, pooled over `rs` ('-': not recorded)."""
  counts = collections.Counter()
  for r in rs:
    counts.update(r.get('choice_text') or {})
  if not counts:
    return '-'
  return f'{counts["right"]} / {counts["written"]} ({counts["letter_agrees"]})'


def table(sweep_dir):
  lines = []
  routers = router_stats(sweep_dir)
  for mode, models in sorted(results(sweep_dir).items()):
    names = sorted({t for tasks in models.values() for t in tasks})
    n = {t: max(r['n'] for m in models.values() for r in m.get(t, [])) for t in names}
    lines += [f'### {mode} ({"pass@1" if mode == "generate" else "acc_norm"}, %)', '',
              '| model | ' + ' | '.join(f'{t} (n={n[t]})' for t in names) +
              ' | answer letters, % of MC answers |' +
              (' choice text right / written (letter agrees) |' if mode == 'generate' else '') +
              ' router (last training step) |',
              '|---' * (len(names) + 3 + (mode == 'generate')) + '|']
    for model, tasks in models.items():
      pooled = [r for rs in tasks.values() for r in rs]
      lines.append(f'| {model} | ' + ' | '.join(_cell(tasks[t]) if t in tasks else '-'
                                               for t in names) +
                   f' | {_letters(pooled) or "not recorded"} |' +
                   (f' {_texts(pooled)} |' if mode == 'generate' else '') +
                   f' {_router(routers.get(model))} |')
    first = {}   # every model answers the same questions: one result per task
    for m in models.values():
      for t, rs in m.items():
        first.setdefault(t, rs[0])
    gold = _letters(list(first.values()), 'gold_letters')
    lines += ['', f'gold letters of the questions (% of MC questions): {gold or "not recorded"}',
              '']
  return '\n'.join(lines)


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  print(cli.run_reporting_errors(table, flags.FLAGS.workdir))


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
