"""Synthetic runs tables drawn from known laws (seed 002 Table 2) plus noise."""
import numpy as np

from moe_jax.scaling_laws import forms, presets, table


def runs(form_name, params, grid, noise, seed=0):
  """Columns over the product of `grid` {column: values}, loss * exp(N(0, noise))."""
  mesh = np.meshgrid(*grid.values(), indexing='ij')
  cols = {k: m.ravel() for k, m in zip(grid, mesh)}
  loss = forms.predict(forms.get(form_name), params, cols)
  cols['loss'] = loss * np.exp(np.random.default_rng(seed).normal(0, noise, loss.shape))
  return cols


def table2(name):
  return dict(presets.PRESETS[name]['params'])


def dataset_law_at(n1):
  """Eq. 12 of Table 2 at a fixed N1 is eq. 8 with E' = B N1^-beta + E."""
  p = table2('table2_upcycled')
  return {'A': p['A'], 'alpha1': p['alpha1'], 'alpha2': p['alpha2'], 'alpha3': p['alpha3'],
          'E': p['B'] * n1 ** -p['beta'] + p['E']}


def write_upcycled_table(path):
  """A runs table of 27 upcycled runs (N1, D1, D2 three values each) drawn
  from Table 2's upcycled law with 0.3 % noise, written to `path`: what a
  `fit --form=joint --kind=upcycled` recovers the law from."""
  cols = runs('joint', table2('table2_upcycled'), {'N1': np.geomspace(1e7, 1e9, 3),
                                                   'D1': np.geomspace(1e9, 1e11, 3),
                                                   'D2': np.geomspace(1e9, 1e11, 3)}, noise=0.003)
  cols['kind'] = np.array(['upcycled'] * len(cols['loss']))
  cols['source_experts'] = np.zeros(len(cols['loss']))
  table.write(cols, path)
