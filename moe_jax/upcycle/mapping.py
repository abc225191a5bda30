"""The strict mapping engine: rules x source params -> target params.

  plan(rules, src_paths, dst_paths)          -> {target: (rule, sources)}
  map_tree(rules, src_params, abstract_dst, rng, *, extra=None) -> dst_params
  transform(recipe, src_params, abstract_dst, rng, out_shardings=None)
  map_opt_state(recipe, opt_state, abstract_opt_state, abstract_dst, policy)

Strictness (docs/architecture.md, "Principles"): every target leaf must match a rule, every
source a rule names must exist, and every source leaf must feed some target;
otherwise a one-line ConfigError names the leaves. Leaves that a rule marks
fresh (no sources) are the only ones made from nothing. `extra` holds more
named leaves rules may read (e.g. a tree the caller initialised) that, unlike
source leaves, need not all be used.

`map_tree` is pure and traceable: the plan is Python over path strings, the ops
are jnp, and per-layer facts (replica slots, layer maps) are constants baked
into the ops by the recipe. Each leaf gets its own rng, folded from the path,
so a leaf's value does not depend on which other leaves exist.
"""
import zlib

import jax
import jax.numpy as jnp

from moe_jax.errors import ConfigError
from moe_jax.upcycle import paths
from moe_jax.upcycle.rules import Ctx, first_match

POLICIES = ('reset', 'copy', 'scale')


def plan(rules, src_paths, dst_paths, extra_paths=()):
  """Which rule and which source leaves make each target leaf."""
  src_paths, extra_paths = set(src_paths), set(extra_paths)
  out, unmatched, missing = {}, [], []
  for path in sorted(dst_paths):
    rule, m = first_match(rules, path)
    if rule is None:
      unmatched.append(path)
      continue
    sources = rule.source_paths(m)
    missing += [f'{path} <- {s}' for s in sources if s not in src_paths | extra_paths]
    out[path] = (rule, sources)
  if unmatched:
    raise ConfigError(f'target leaves match no upcycle rule: {paths.summary(unmatched)}')
  if missing:
    raise ConfigError(f'upcycle rules name missing source leaves: {paths.summary(missing)}')
  used = {s for _, sources in out.values() for s in sources}
  unused = sorted(src_paths - used)
  if unused:
    raise ConfigError(f'source leaves feed no target leaf: {paths.summary(unused)}')
  return out


def _fold(rng, name):
  return jax.random.fold_in(rng, zlib.crc32(name.encode()) & 0x7FFFFFFF)


def map_tree(rules, src_params, abstract_dst, rng, *, extra=None, moment_power=None):
  """Target params from source params by `rules`.

  With `moment_power` set, maps optimizer moments instead: each op's
  structural `moment` function (fresh leaves -> zeros, no noise), see rules.py.
  """
  src = paths.flatten(src_params)
  more = paths.flatten(extra) if extra else {}
  dst = paths.flatten(abstract_dst)
  out = {}
  for path, (rule, sources) in plan(rules, src, dst, more).items():
    leaves = [jnp.asarray(src[s] if s in src else more[s]) for s in sources]
    target = dst[path]
    if moment_power is None:
      ctx = Ctx(path, _fold(rng, path), _fold(rng, paths.layer(path) or path))
      value = rule.op.init(leaves, target, ctx)
    else:
      value = rule.op.moment(leaves, target, Ctx(path, _fold(rng, path), _fold(rng, path)),
                             moment_power)
    if tuple(value.shape) != tuple(target.shape):
      got = ', '.join(f'{s} {tuple(x.shape)}' for s, x in zip(sources, leaves))
      raise ConfigError(f'{path}: op {rule.op.name} made shape {tuple(value.shape)}, the target '
                        f'config needs {tuple(target.shape)} (from {got or "nothing"})')
    out[path] = jnp.asarray(value, target.dtype)
  return paths.unflatten(out)


def transform(recipe, src_params, abstract_dst, rng, out_shardings=None, extra=None):
  """`map_tree` under jit, writing each target leaf straight into its sharding.

  `out_shardings` is a tree like `abstract_dst` (or one sharding); without it
  jit places the outputs. The rules are checked while tracing, so a bad recipe
  fails before any device work. `rng` is a key or an int seed, whose key is
  made inside the program (jax.random.key outside a jit compiles two small
  programs of its own).
  """
  def transform(src, rng, extra):
    if not jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
      rng = jax.random.key(rng)
    return map_tree(recipe.rules, src, abstract_dst, rng=rng, extra=extra)

  return jax.jit(transform, out_shardings=out_shardings)(src_params, rng, extra)


def _mirrors(opt_state, dst_shapes):
  """{prefix: {param path: (key path, leaf)}} for leaves that mirror params.

  A leaf mirrors a param when its key path ends in dict keys that spell a
  param path with the param's shape, like Adam's mu and nu inside an optax
  state (which may hold `MaskedNode`s where a param is frozen).
  """
  groups = {}
  for kp, leaf in jax.tree_util.tree_flatten_with_path(opt_state)[0]:
    for i in range(len(kp)):
      tail = kp[i:]
      if all(isinstance(k, jax.tree_util.DictKey) for k in tail) and paths.join(tail) in dst_shapes:
        groups.setdefault(paths.join(kp[:i]), {})[paths.join(tail)] = (kp, leaf)
        break
  return groups


def _power(prefix, policy):
  if policy != 'scale':
    return 0
  name = prefix.split('/')[-1] if prefix else ''
  return {'mu': 1, 'nu': 2}.get(name, 0)


def map_opt_state(recipe, opt_state, abstract_opt_state, abstract_dst, policy):
  """Optimizer state for the target params, for in-run transitions.

  `abstract_opt_state` is `jax.eval_shape(tx.init, abstract_dst)` for the
  target's optimizer. Leaves that mirror params (Adam mu and nu) are mapped
  with the recipe's rules in moment mode; the rest (step counts) are kept.
    reset  mirrored leaves and counts start from zero, as a fresh optimizer.
    copy   moments follow their parameters (replicas copy their source's).
    scale  as copy, and a source expert copied r times gives each copy
           mu / r and nu / r**2 (each copy sees ~1/r of its tokens; dense ->
           MoE uses r = E / top_k). Moments are recognised by the optax field
           names 'mu' and 'nu'; other mirrored leaves are copied.
  """
  if policy not in POLICIES:
    raise ConfigError(f'upcycle.args.opt_policy={policy!r} is not one of {POLICIES}')
  if policy == 'reset':
    return jax.tree_util.tree_map(lambda t: jnp.zeros(t.shape, t.dtype), abstract_opt_state)
  dst_shapes = paths.flatten(abstract_dst)
  new_groups = _mirrors(abstract_opt_state, dst_shapes)
  old_leaves = {paths.join(kp): leaf for kp, leaf in
                jax.tree_util.tree_flatten_with_path(opt_state)[0]}
  values = {}
  for prefix, group in new_groups.items():
    join = (lambda p: f'{prefix}/{p}') if prefix else (lambda p: p)
    old = {p: x for p, x in old_leaves.items() if p.startswith(join(''))}
    src = {p[len(join('')):]: x for p, x in old.items()}
    dst = {p: leaf for p, (_, leaf) in group.items()}
    mapped = paths.flatten(map_tree(recipe.rules, paths.unflatten(src), paths.unflatten(dst),
                                    jax.random.key(0), moment_power=_power(prefix, policy)))
    values.update({join(p): x for p, x in mapped.items()})

  def leaf(kp, t):
    name = paths.join(kp)
    if name in values:
      return values[name]
    if name not in old_leaves or tuple(old_leaves[name].shape) != tuple(t.shape):
      raise ConfigError(f'optimizer state leaf {name} has no counterpart in the old state')
    return jnp.asarray(old_leaves[name], t.dtype)

  return jax.tree_util.tree_map_with_path(leaf, abstract_opt_state)
