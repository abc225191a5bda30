"""The train state's layout under `model.scan_layers`: each scan column stacked.

The scanned stack (models/scan.py) runs the layers of a scan column (layers
start + q, start + q + period, ... of a group) as one [R, ...] array per
leaf. A train state of `layers_{i}` leaves costs compile time per layer: the
step stacks them for the scan and slices the scan's gradients back into
per-layer leaves for the optimizer, one op per layer and leaf (at 24 layers
those made the step compile 2.3x as long as at 8, docs/benchmarks.md). So
under scan_layers the train state holds each column stacked, as
`stack_{start}_{q}`, and the model reads `unstack(params)`: slices that XLA
folds into the scan's own stacking, leaving nothing per layer.

The stacked layout lives only in the train state (params and optimizer
state). Checkpoints, upcycling, evaluation and every other reader see
`layers_{i}` (the paths are API, docs/internals.md), converted where the
trainer hands the state over (train/program.py). Without scan_layers both
functions return their input.
"""
import re

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from moe_jax.models import scan

_LAYER = re.compile(r'layers_\d+')


def columns(cfg):
  """[(stacked key, [layers_i of that scan column, in scan order])]."""
  return [(f'stack_{start}_{q}', names)
          for start, pattern, repeats in scan.groups(cfg)
          for q, names in enumerate(scan.columns(start, len(pattern), repeats))]


def stack(tree, cfg, combine=lambda *v: jnp.stack(v)):
  """`tree` with the `layers_{i}` entries of each of its dicts stacked per
  scan column: params, Adam's moments (found at any depth of an optax state,
  masked leaves included), per-layer statistics. A dict holding some of a
  column's layers but not all is an error. `combine(*leaves)` builds one
  stacked leaf (`sharding` for a tree of shardings)."""
  if not cfg.scan_layers:
    return tree
  cols = columns(cfg)

  def convert(d):
    out = {k: v for k, v in d.items() if not _LAYER.fullmatch(k)}
    for key, names in cols:
      found = [n for n in names if n in d]
      if found and found != names:
        raise ValueError(f'{key} stacks {names}; the tree has only {found}')
      if found:
        out[key] = jax.tree.map(combine, *[d[n] for n in names])
    return out

  return _map_dicts(tree, lambda d: any(_LAYER.fullmatch(k) for k in d), convert)


def unstack(tree, cfg):
  """`stack`'s inverse: every `stack_{start}_{q}` entry back into its
  `layers_{i}` (a tree already in that layout comes back as it is)."""
  if not cfg.scan_layers:
    return tree
  cols = dict(columns(cfg))

  def convert(d):
    out = {k: v for k, v in d.items() if k not in cols}
    for key, names in cols.items():
      if key in d:
        for r, name in enumerate(names):
          out[name] = jax.tree.map(lambda v, r=r: v[r], d[key])
    return out

  return _map_dicts(tree, lambda d: any(k in cols for k in d), convert)


def sharding(first, *_):
  """`stack`'s combine for shardings: the layers' placement, the [R] axis whole."""
  return NamedSharding(first.mesh, P(None, *first.spec))


def _map_dicts(tree, wanted, convert):
  """`tree` with every dict `wanted` picks replaced by `convert(dict)`."""
  is_wanted = lambda x: isinstance(x, dict) and wanted(x)
  return jax.tree.map(lambda x: convert(x) if is_wanted(x) else x, tree, is_leaf=is_wanted)
