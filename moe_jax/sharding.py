"""Device mesh, logical axis names and the rules that map them to mesh axes.

Sharding is annotated, not hard-coded (docs/architecture.md). Every param
gets logical axis names from its path (`PARAM_AXES`, paths as in
docs/internals.md); `rules` map each logical name to a tuple of mesh axes. The
same model then runs data-parallel, FSDP, expert-parallel or tensor-parallel
by changing `config.mesh` only.

Mesh axes, outermost first: `data` (pure data parallel: params replicated),
`fsdp` (batch split and params sharded along `embed`), `expert` (batch split
and experts spread, see moe_jax/parallel/expert.py) and `tensor` (heads, MLP
width and vocabulary split; tokens replicated). Keeping `tensor` innermost puts
its frequent collectives on the fastest links of `create_device_mesh`.
"""
import re

import jax
from jax.experimental import mesh_utils
from jax.sharding import NamedSharding, PartitionSpec as P
import numpy as np

from moe_jax.errors import ConfigError

MESH_AXES = ('data', 'fsdp', 'expert', 'tensor')

# Logical axis -> mesh axes. `batch` spans every axis that splits tokens; a
# mesh axis already taken by an earlier dim of the same array is skipped, so
# activations [batch, length, embed] stay replicated along `embed`.
DEFAULT_RULES = {
    'batch': ('data', 'fsdp', 'expert'),
    'length': (),
    'embed': ('fsdp',),
    'mlp': ('tensor',),
    'heads': ('tensor',),
    'kv_heads': ('tensor',),
    'head_dim': (),
    'vocab': ('tensor',),
    'expert': ('expert',),
}

# Param path regex -> logical axes per dim (None: replicated). The router's
# expert dim stays whole: every token scores every expert.
PARAM_AXES = (
    (r'embed/embedding', ('vocab', 'embed')),
    (r'layers_\d+/(attn|mlp)_norm/scale', (None,)),
    (r'layers_\d+/attn/q', ('embed', 'heads', 'head_dim')),
    (r'layers_\d+/attn/(k|v)', ('embed', 'kv_heads', 'head_dim')),
    (r'layers_\d+/attn/o', ('heads', 'head_dim', 'embed')),
    (r'layers_\d+/attn/q_bias', ('heads', 'head_dim')),
    (r'layers_\d+/attn/(k|v)_bias', ('kv_heads', 'head_dim')),
    (r'layers_\d+/attn/(q|k)_norm/scale', ('head_dim',)),
    (r'layers_\d+/(mlp|moe/shared)/(wi_0|wi_1)', ('embed', 'mlp')),
    (r'layers_\d+/(mlp|moe/shared)/wo', ('mlp', 'embed')),
    (r'layers_\d+/moe/shared_gate', ('embed', None)),
    (r'layers_\d+/moe/router/w', ('embed', None)),
    (r'layers_\d+/moe/router/bias', (None,)),
    (r'layers_\d+/moe/experts/(wi_0|wi_1)', ('expert', 'embed', 'mlp')),
    (r'layers_\d+/moe/experts/wo', ('expert', 'mlp', 'embed')),
    (r'final_norm/scale', (None,)),
    (r'lm_head', ('embed', 'vocab')),
)


def make_mesh(mesh_cfg, devices=None):
  """A Mesh with axes MESH_AXES sized by `mesh_cfg` (one size may be -1: the rest)."""
  devices = list(jax.devices() if devices is None else devices)
  sizes = {a: int(mesh_cfg[a]) for a in MESH_AXES}
  rest = [a for a, s in sizes.items() if s == -1]
  bad = [a for a, s in sizes.items() if s == 0 or s < -1]
  if bad or len(rest) > 1:
    raise ConfigError(f'mesh sizes {sizes}: each must be positive, at most one -1')
  fixed = int(np.prod([s for s in sizes.values() if s != -1]))
  if len(devices) % fixed or (not rest and fixed != len(devices)):
    raise ConfigError(f'mesh sizes {sizes} do not divide the {len(devices)} '
                      'devices')
  if rest:
    sizes[rest[0]] = len(devices) // fixed
  shape = [sizes[a] for a in MESH_AXES]
  return jax.sharding.Mesh(mesh_utils.create_device_mesh(shape, devices),
                           MESH_AXES)


def rules_from_config(mesh_cfg):
  """DEFAULT_RULES with the overrides in `mesh.rules`.

  `mesh.rules` is a string so that it overrides from the command line:
  'embed=fsdp+tensor,vocab=' maps `embed` to two mesh axes and replicates
  `vocab`.
  """
  rules = dict(DEFAULT_RULES)
  for item in filter(None, mesh_cfg.rules.split(',')):
    name, eq, axes = item.partition('=')
    name = name.strip()
    axes = tuple(filter(None, (a.strip() for a in axes.split('+'))))
    if not eq or name not in DEFAULT_RULES:
      raise ConfigError(f'mesh.rules item {item!r}: want NAME=AXIS+AXIS with '
                        f'NAME one of {sorted(DEFAULT_RULES)}')
    unknown = [a for a in axes if a not in MESH_AXES]
    if unknown:
      raise ConfigError(f'mesh.rules item {item!r}: mesh axes {unknown} are not '
                        f'in {MESH_AXES}')
    rules[name] = axes
  return rules


def logical_spec(logical_axes, mesh, rules, shape=None):
  """PartitionSpec for an array whose dims carry `logical_axes`.

  A mesh axis used by an earlier dim is skipped; with `shape`, a dim whose
  size its mesh axes do not divide is replicated instead.
  """
  used, spec = set(), []
  for i, name in enumerate(logical_axes):
    axes = () if name is None else rules[name]
    axes = tuple(a for a in axes if a not in used and mesh.shape[a] > 1)
    if shape is not None and shape[i] % _size(mesh, axes):
      axes = ()
    used.update(axes)
    spec.append(axes[0] if len(axes) == 1 else (axes or None))
  return P(*spec)


def param_logical_axes(params):
  """Tree of logical-axis tuples, one per param, from PARAM_AXES."""
  def axes(path, leaf):
    name = path_str(path)
    for pattern, logical in PARAM_AXES:
      if re.fullmatch(pattern, name):
        if len(logical) != len(leaf.shape):
          raise ConfigError(f'param {name} has shape {tuple(leaf.shape)}; '
                            f'sharding rules expect {len(logical)} dims')
        return logical
    raise ConfigError(f'param {name} matches no sharding rule in '
                      'moe_jax.sharding.PARAM_AXES')
  return jax.tree_util.tree_map_with_path(axes, params)


def param_shardings(abstract_params, mesh, rules):
  """Tree of NamedSharding for params (arrays or ShapeDtypeStructs)."""
  logical = param_logical_axes(abstract_params)
  return jax.tree.map(
      lambda names, leaf: NamedSharding(
          mesh, logical_spec(names, mesh, rules, leaf.shape)),
      logical, abstract_params, is_leaf=lambda x: isinstance(x, tuple))


def batch_sharding(mesh, rules=None, batch_size=None):
  """Sharding of [batch, ...] input arrays: batch split over `rules['batch']`."""
  axes = tuple(a for a in (rules or DEFAULT_RULES)['batch']
               if mesh.shape[a] > 1)
  if batch_size is not None and batch_size % _size(mesh, axes):
    raise ConfigError(f'batch_size={batch_size} is not divisible by the '
                      f'{_size(mesh, axes)} shards of mesh axes {axes}')
  return NamedSharding(mesh, P(axes or None))


def shard_init(init_fn, mesh, rules, *args):
  """Params born sharded: `init_fn(*args)` is jitted with out_shardings.

  `jax.eval_shape` traces init without running it, so no full copy of the
  params ever exists on one device.
  """
  abstract = jax.eval_shape(init_fn, *args)
  shardings = param_shardings(abstract, mesh, rules)
  return jax.jit(init_fn, out_shardings=shardings)(*args)


def opt_state_shardings(abstract_opt_state, abstract_params, param_shardings_):
  """Shardings for an optimizer state given the params' shardings.

  A leaf whose path ends with a param's path and has its shape (Adam's mu and
  nu, momentum) mirrors that param. Otherwise a leaf whose shape belongs to
  params that all share one sharding gets it. Anything else (step counts,
  factored second moments) is replicated.
  """
  flat_p = jax.tree_util.tree_flatten_with_path(abstract_params)[0]
  flat_s = jax.tree.leaves(param_shardings_)
  by_path = {_names(path): (leaf.shape, s)
             for (path, leaf), s in zip(flat_p, flat_s)}
  by_shape = {}
  for shape, s in by_path.values():
    by_shape.setdefault(tuple(shape), set()).add(s)
  mesh = flat_s[0].mesh
  replicated = NamedSharding(mesh, P())

  def pick(path, leaf):
    names, shape = _names(path), tuple(leaf.shape)
    for i in range(len(names)):
      hit = by_path.get(names[i:])
      if hit is not None and tuple(hit[0]) == shape:
        return hit[1]
    same = by_shape.get(shape, ())
    if shape and len(same) == 1:
      return next(iter(same))
    return replicated
  return jax.tree_util.tree_map_with_path(pick, abstract_opt_state)


def path_str(path):
  """'layers_0/moe/experts/wi_0' for a jax key path."""
  return '/'.join(_names(path))


def _names(path):
  out = []
  for key in path:
    for attr in ('key', 'name', 'idx'):
      if hasattr(key, attr):
        out.append(str(getattr(key, attr)))
        break
  return tuple(out)


def _size(mesh, axes):
  return int(np.prod([mesh.shape[a] for a in axes]))
