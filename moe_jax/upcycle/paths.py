"""Param paths: the '/'-joined names upcycling rules match (docs/internals.md).

Params are plain nested dicts, so a path is the dict keys joined by '/', e.g.
`layers_3/moe/experts/wi_0`. Every rule, error message and score dump speaks
in these paths, so a user reads the same names everywhere.
"""
import re

import jax


_LAYER = re.compile(r'^(layers_(\d+))/')


def _key(entry):
  return str(getattr(entry, 'key', getattr(entry, 'name', entry)))


def join(key_path):
  """A jax key path (DictKey, GetAttrKey, ...) as a '/'-joined string."""
  return '/'.join(_key(k) for k in key_path)


def flatten(tree):
  """{path: leaf} for a nested dict of arrays (or ShapeDtypeStructs)."""
  leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {join(kp): leaf for kp, leaf in leaves}


def unflatten(flat):
  """The nested dict whose `flatten` is `flat`."""
  tree = {}
  for path, leaf in flat.items():
    *parents, name = path.split('/')
    node = tree
    for p in parents:
      node = node.setdefault(p, {})
    node[name] = leaf
  return tree


def layer(path):
  """'layers_3' for 'layers_3/moe/router/w'; None outside the layer stack."""
  m = _LAYER.match(path)
  return m.group(1) if m else None


def summary(items, limit=6):
  """A one-line list of at most `limit` items plus a count of the rest."""
  items = list(items)
  head = ', '.join(items[:limit])
  return head + (f' (+{len(items) - limit} more)' if len(items) > limit else '')
