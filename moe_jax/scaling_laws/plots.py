"""PNG plots: a fitted law against its runs, and the D* curve.

matplotlib is imported inside the functions (Agg backend), so the rest of the
package works without it. Files are written atomically, in the format their
extension names (FORMATS; none: PNG).
"""
import io
import os

import numpy as np

from moe_jax import atomic
from moe_jax.scaling_laws import forms

FORMATS = ('png', 'pdf', 'svg')


def _save(plt, fig, path):
  buffer = io.BytesIO()
  fig.savefig(buffer, format=os.path.splitext(path)[1][1:].lower() or 'png', dpi=120)
  plt.close(fig)
  atomic.write_bytes(path, buffer.getvalue())


def _pyplot():
  import matplotlib   # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot   # pylint: disable=g-import-not-at-top
  return pyplot


def fit_curves(form, params, cols, path):
  """Loss against the form's last variable, one fitted curve per value of the
  others (as seed 002 Figs. 4-6 draw them), and a predicted-vs-observed panel."""
  plt = _pyplot()
  x_name = form.columns[-1]
  group_names = [c for c in form.columns if c != x_name]
  keys = list(zip(*[cols[g] for g in group_names])) if group_names else [()] * len(cols[x_name])
  fig, (ax, parity) = plt.subplots(1, 2, figsize=(11, 4.5))
  x_grid = np.geomspace(cols[x_name].min(), cols[x_name].max(), 100)
  for key in sorted(set(keys)):
    on = np.array([k == key for k in keys])
    label = ', '.join(f'{g}={v:.3g}' if isinstance(v, float) else f'{g}={v}'
                      for g, v in zip(group_names, key))
    points = ax.scatter(cols[x_name][on], cols['loss'][on], s=14, label=label or None)
    curve = {g: np.full(x_grid.shape, v) for g, v in zip(group_names, key)}
    curve[x_name] = x_grid
    ax.plot(x_grid, forms.predict(form, params, curve), color=points.get_facecolor()[0])
  ax.set(xscale='log', xlabel=f'{x_name} (log scale)', ylabel='loss (nats/token)',
         title=form.equation)
  ax.title.set_fontsize(8)
  if len(set(keys)) <= 12 and group_names:
    ax.legend(fontsize=7)
  predicted = forms.predict(form, params, cols)
  parity.scatter(cols['loss'], predicted, s=14)
  lim = [min(predicted.min(), cols['loss'].min()), max(predicted.max(), cols['loss'].max())]
  parity.plot(lim, lim, 'k--', lw=1)
  parity.set(xlabel='observed loss (nats/token)', ylabel='predicted loss (nats/token)',
             title='predicted against observed (dashed: equal)')
  fig.tight_layout()
  _save(plt, fig, path)


def dstar_curve(n1, numerical, approximation, path):
  """D* against N1: eq. 13 solved numerically, and eq. 2 (seed 002 Fig. 1 right)."""
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(5.5, 4.5))
  ax.plot(n1, np.asarray(numerical, float) / 1e9, 'o-', label='eq. 13 (numerical)')
  ax.plot(n1, np.asarray(approximation, float) / 1e9, '--', label='eq. 2')
  ax.set(xscale='log', yscale='log', xlabel='N1 (dense non-embedding parameters)',
         ylabel='D* (B tokens)', title='D*: beyond it a MoE from scratch beats upcycling')
  ax.legend()
  fig.tight_layout()
  _save(plt, fig, path)
