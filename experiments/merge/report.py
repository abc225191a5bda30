r"""The merge study's table, routing plot and results file.

  python -m experiments.merge.report --workdir=DIR --data=DOMAINS
  python -m experiments.merge.report --results=DIR/merge.json [--out=DIR2]

Reads a sweep of experiments/merge/config.py and writes DIR/merge.md (and
prints it), DIR/plots/merge_routing.png and DIR/merge.json (the results file
`--results` rebuilds the markdown from). Every model is scored on every
domain's validation files (domains.py: the same held-out text for all), all
of them, in batches of the run's batch_size x seq_len: mean next-byte
cross-entropy in nats. A merged run is also scored at its step 0 (right
after merging), and its routing is given as the share of a domain's
(token, top-k slot) pairs that go to that domain's branch's experts, over
both MoE layers, at step 0 and at its last step. One seed: no intervals.
"""
import datetime
import os
import platform

import jax
import numpy as np

from experiments import plots, provenance, report, study_cli, sweep
from experiments.merge import config as study, domains
from moe_jax.data import corpus, packing, sources
from moe_jax.errors import ConfigError
from moe_jax.eval import restore
from moe_jax.models import losses
from moe_jax.upcycle import merge_router
from moe_jax.workdir import files

REPORT_FILE, RESULTS_FILE, PLOT = 'merge.md', 'merge.json', 'merge_routing.png'


def domain_batches(data, domain, config, tok):
  """Every validation row of `domain` once, as batches of config.batch_size
  rows of config.seq_len (the last one shorter)."""
  docs = corpus.text_files(os.path.join(data, domain, 'val', '*.txt'))
  rows = packing.pack(sources.tokenize(docs, tok), config.seq_len, tok.pad_id)
  n, b = len(rows.tokens), config.batch_size
  return [rows.batch(np.arange(s, min(s + b, n))) for s in range(0, n, b)]


def mean_loss(loaded, batches):
  @jax.jit
  def total(params, batch):
    logits, _ = loaded.model.apply({'params': params}, batch['inputs'],
                                   segment_ids=batch['segment_ids'], positions=batch['positions'])
    loss, n = losses.cross_entropy(logits, batch['targets'], batch['loss_mask'])
    return loss * n, n

  s = n = 0.0
  for batch in batches:
    a, b = (float(x) for x in total(loaded.params, batch))
    s, n = s + a, n + b
  return s / n


def measure(sweep_dir, data):
  """{'loss': {model: {domain: nats}}, 'share': {model: {domain: share}},
  'tokens': {model: tokens trained in its run}} over the runs that are done."""
  out = dict(loss={}, share={}, tokens={})
  names = ['base'] + [f'dense_{d}' for d in domains.DOMAINS] + ['dense_union'] + [
      f'merged_{r}' for r in study.ROUTERS]
  batches = {}
  for name in names:
    run_dir = os.path.join(sweep_dir, name)
    if sweep.read_json(os.path.join(run_dir, 'status.json'), {}).get('state') != 'done':
      continue
    steps = {'': None, '@0': 0} if name.startswith('merged_') else {'': None}
    for suffix, step in steps.items():
      ckpt = run_dir if step is None else os.path.join(run_dir, files.CHECKPOINTS, str(step))
      loaded = restore.load(ckpt)
      key = name + suffix
      if not batches:
        batches = {d: domain_batches(data, d, loaded.config, loaded.tokenizer)
                   for d in domains.DOMAINS}
      out['loss'][key] = {d: mean_loss(loaded, b) for d, b in batches.items()}
      if name.startswith('merged_'):
        out['share'][key] = {d: merge_router.own_share(loaded.config, loaded.params, b, i, 1)
                             for i, (d, b) in enumerate(batches.items())}
      c = loaded.config
      out['tokens'][key] = loaded.step * c.batch_size * c.seq_len
  return out


def _f(x):
  return '' if x is None else f'{x:.4f}'


def text(results):
  loss, share = results['loss'], results['share']
  header = ['model', 'tokens'] + list(domains.DOMAINS) + ['mean']
  rows = []
  for key, by_domain in loss.items():
    values = [by_domain.get(d) for d in domains.DOMAINS]
    rows.append([key, f"{results['tokens'][key]:,}"] + [_f(v) for v in values]
                + [_f(float(np.mean(values)))])
  own = ['own branch', ''] + [_f(loss.get(f'dense_{d}', {}).get(d)) for d in domains.DOMAINS]
  rows.append(own + [_f(float(np.mean([float(v) for v in own[2:]]))) if all(own[2:]) else ''])
  lines = [f"Validation loss (nats/byte) per domain; {results['note']}.", '',
           report.markdown(header, rows), '']
  if share:
    lines += ['Share of a domain\'s routed (token, slot) pairs that go to its own branch\'s '
              'expert (chance: 1/3):', '',
              report.markdown(['model'] + list(domains.DOMAINS),
                              [[k] + [_f(v.get(d)) for d in domains.DOMAINS]
                               for k, v in share.items()]), '']
  return '\n'.join(lines)


def plot(results, path):
  plt = plots.pyplot()
  share = results['share']
  fig, ax = plt.subplots(figsize=(6, 3.5))
  width = 0.8 / max(len(share), 1)
  for j, (key, by_domain) in enumerate(share.items()):
    xs = np.arange(len(domains.DOMAINS)) + j * width
    ax.bar(xs, [by_domain[d] for d in domains.DOMAINS], width, label=key)
  ax.axhline(1 / len(domains.DOMAINS), color='k', lw=0.8, ls='--', label='chance')
  ax.set_xticks(np.arange(len(domains.DOMAINS)) + 0.4 - width / 2, domains.DOMAINS)
  ax.set(ylabel="share routed to the domain's own expert", ylim=(0, 1),
         title='routing by domain: @0 right after merging, else after training')
  ax.legend(fontsize=7)
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)


def write(sweep_dir, data):
  if not data:
    raise ConfigError('--data=DIR (the domains the sweep trained on) is required')
  results = dict(measure(sweep_dir, data), note='one seed, no interval',
                 date=datetime.date.today().isoformat(),
                 machine=f'{platform.machine()} CPU, {os.cpu_count()} cores',
                 sweep=sweep.repo_spec(sweep_dir),
                 provenance=provenance.record())
  files.write_json(os.path.join(sweep_dir, RESULTS_FILE), results)
  if results['share']:
    os.makedirs(os.path.join(sweep_dir, 'plots'), exist_ok=True)
    plot(results, os.path.join(sweep_dir, 'plots', PLOT))
  md = text(results)
  with open(os.path.join(sweep_dir, REPORT_FILE), 'w') as f:
    f.write(md)
  return md


def from_results(path):
  return text(files.read_json(path))


def rebuild(path, out=None):
  results = files.read_json(path)
  if out:
    os.makedirs(out, exist_ok=True)
    if results['share']:
      plot(results, os.path.join(out, PLOT))
  return text(results)


if __name__ == '__main__':
  from absl import flags
  study_cli.run(write, rebuild, option=lambda: flags.DEFINE_string(
      'data', None, 'The domains directory the sweep trained on (experiments.merge.domains).'))
