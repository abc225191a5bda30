"""PNG plots of a sweep's runs (the dicts of `report.load_runs`).

matplotlib is imported inside the functions (Agg backend). Every PNG is
written to a temporary name and renamed, so a reader never sees half of one.
"""
import os
import re

import numpy as np

_LOAD = re.compile(r'moe/layers_(\d+)/load')


def pyplot():
  import matplotlib   # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot   # pylint: disable=g-import-not-at-top
  return pyplot


def save(fig, path):
  tmp = f'{path}.tmp-{os.getpid()}.png'
  fig.savefig(tmp, dpi=110)
  os.replace(tmp, path)


def _zoom(values, steps, last):
  """y-limits that hold `values` logged at steps >= `last` (the runs' second
  half), with a margin: where close runs separate."""
  tail = [v for x, v in zip(steps, values) if x >= last and np.isfinite(v)]
  if not tail:
    return None
  lo, hi = min(tail), max(tail)
  pad = max((hi - lo) * 0.1, 1e-3)
  return lo - pad, hi + pad


def loss_curves(runs, metric, path):
  """Training loss (thin) and `metric` (markers) of every run: on the left
  over the whole run with a log y-axis, on the right the second half zoomed
  to its own range, where runs that end close apart separate. A run grown from
  another run's checkpoint starts at that checkpoint's step (a dashed line
  there); an in-run transition at tau is a dotted line."""
  plt = pyplot()
  fig, (full, zoom) = plt.subplots(1, 2, figsize=(12, 5))
  xs, ys, end = [], [], 0
  for i, r in enumerate(runs):
    if not r['metrics']:   # not started yet
      continue
    color = f'C{i % 10}'
    x0 = r['start_step']
    train = [(row['step'] + x0, row['loss']) for row in r['metrics'] if 'loss' in row]
    val = [(row['step'] + x0, row[metric]) for row in r['metrics'] if metric in row]
    for ax in (full, zoom):
      if train:
        ax.plot(*zip(*train), color=color, lw=0.8, alpha=0.6)
      ax.plot(*(zip(*val) if val else ([], [])), 'o-', color=color, ms=3, label=r['name'])
      if x0:
        ax.axvline(x0, color=color, ls='--', lw=0.8)
      tau = (r['config'] or {}).get('upcycle', {}).get('step', 0)
      if tau:
        ax.axvline(x0 + tau, color=color, ls=':', lw=1.2)
    for x, y in train + val:
      xs.append(x)
      ys.append(y)
    end = max([end] + [x for x, _ in train + val])
  if ys and min(ys) > 0:
    full.set_yscale('log')
  full.set(xlabel='step (a grown run starts at the step it grew from)',
           ylabel='loss (nats/token, log scale)',
           title=f'training loss (thin) and {metric} (dots)')
  limits = _zoom(ys, xs, end / 2)
  if limits:
    zoom.set_xlim(end / 2, end * 1.02)
    zoom.set_ylim(*limits)
  zoom.set(xlabel='step (second half)', ylabel='loss (nats/token)',
           title='second half, zoomed to its range')
  if runs:
    full.legend(fontsize=7)
  fig.tight_layout()
  save(fig, path)
  plt.close(fig)
  return path


def has_load(run):
  return any(_LOAD.fullmatch(k) for row in run['metrics'] for k in row)


def expert_load(run, path):
  """Per MoE layer, the load fraction of each expert over the logged steps; a
  uniform router gives every expert 1/E. Experts added in-run start blank."""
  plt = pyplot()
  layers = sorted({int(m.group(1)) for row in run['metrics'] for k in row
                   for m in [_LOAD.fullmatch(k)] if m})
  fig, axes = plt.subplots(len(layers), 1, figsize=(8, 1.2 + 1.6 * len(layers)), squeeze=False)
  for ax, layer in zip(axes[:, 0], layers):
    key = f'moe/layers_{layer}/load'
    rows = [row for row in run['metrics'] if key in row]
    experts = max(len(row[key]) for row in rows)
    load_SE = np.full((len(rows), experts), np.nan)
    for s, row in enumerate(rows):
      load_SE[s, :len(row[key])] = row[key]
    steps = np.array([row['step'] for row in rows], float)
    mid = (steps[1:] + steps[:-1]) / 2   # logged steps need not be evenly spaced
    edges = np.concatenate([[steps[0] - 0.5], mid, [steps[-1] + 0.5]])
    image = ax.pcolormesh(edges, np.arange(experts + 1) - 0.5, load_SE.T, cmap='viridis')
    ax.set(ylabel='expert', title=f'{run["name"]}: layers_{layer} load (uniform = 1/E)')
    fig.colorbar(image, ax=ax)
  axes[-1, 0].set_xlabel('step')
  fig.tight_layout()
  save(fig, path)
  plt.close(fig)
  return path
