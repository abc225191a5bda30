"""Orbax checkpoints: one step directory holds params, optimizer state, the
data iterator's state and a small JSON `meta` (step, config, provenance).

Items are separate so callers restore only what they need: `init_from`, the
evaluator and the upcycle CLI read `params` alone, and a step-0 checkpoint
written by the upcycle CLI has no `opt_state` or `data` at all (the trainer
then starts both fresh).

Orbax writes each step to a temporary directory and renames it on commit, so a
step directory is complete or absent; a crash mid-save leaves the previous one.
"""
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from moe_jax.errors import ConfigError
from moe_jax.workdir import files

CHECKPOINTS = 'checkpoints'


def resolve(path):
  """CKPT argument -> (checkpoints directory, step or None for the newest).

  Accepts a workdir (has checkpoints/), a checkpoints directory, or one step
  directory inside it.
  """
  path = os.path.abspath(os.path.expanduser(path))
  if not os.path.isdir(path):
    raise ConfigError(f'checkpoint path {path} does not exist')
  if os.path.isdir(os.path.join(path, CHECKPOINTS)):
    return os.path.join(path, CHECKPOINTS), None
  name = os.path.basename(path)
  if name.isdigit() and os.path.isdir(os.path.join(path, 'params')):
    return os.path.dirname(path), int(name)
  if any(d.isdigit() for d in os.listdir(path)):
    return path, None
  raise ConfigError(f'{path} is neither a workdir, a checkpoints directory nor a step directory')


def workdir_config(ckpt):
  """The config a checkpoint was trained with (its workdir's config.json)."""
  directory, _ = resolve(ckpt)
  path = os.path.join(os.path.dirname(directory), files.CONFIG)
  if not os.path.exists(path):
    raise ConfigError(f'{path} is missing: pass --config for checkpoint {ckpt}')
  return files.read_config(os.path.dirname(directory))


class Manager:
  """A thin CheckpointManager over a workdir's checkpoints/ directory."""

  def __init__(self, directory, keep=2, keep_every=0, async_save=True, read_only=False):
    # Orbax's own read_only mode warns on every open; not creating is enough.
    options = ocp.CheckpointManagerOptions(
        max_to_keep=None if read_only else keep or None, keep_period=keep_every or None,
        create=not read_only, enable_async_checkpointing=async_save)
    self.directory = directory
    handlers = dict(params=ocp.StandardCheckpointHandler(), meta=ocp.JsonCheckpointHandler(),
                    opt_state=ocp.StandardCheckpointHandler(), data=ocp.JsonCheckpointHandler())
    self._manager = ocp.CheckpointManager(directory, options=options, item_handlers=handlers)

  @classmethod
  def for_workdir(cls, workdir, ckpt_cfg):
    return cls(os.path.join(workdir, CHECKPOINTS), ckpt_cfg.keep, ckpt_cfg.keep_every,
               ckpt_cfg.async_save)

  def latest_step(self):
    return self._manager.latest_step()

  def items(self, step):
    return set(os.listdir(os.path.join(self.directory, str(step))))

  def save(self, step, params, opt_state=None, data_state=None, meta=None):
    items = dict(params=ocp.args.StandardSave(params),
                 meta=ocp.args.JsonSave(dict(meta or {}, step=int(step))))
    if opt_state is not None:
      items['opt_state'] = ocp.args.StandardSave(opt_state)
    if data_state is not None:
      items['data'] = ocp.args.JsonSave(data_state)
    self._manager.save(int(step), args=ocp.args.Composite(**items), force=True)

  def check_shapes(self, step, name, abstract):
    """Refuses a stored tree whose leaves differ from `abstract` in path or shape.

    Some Orbax restore paths silently take the stored shape; a checkpoint of
    another model must fail here, by name, before anything is restored.
    """
    stored = self._manager.item_metadata(step)[name]
    stored = getattr(stored, 'tree', stored)
    want = {jax.tree_util.keystr(k): tuple(v.shape)
            for k, v in jax.tree_util.tree_leaves_with_path(abstract)}
    have = {jax.tree_util.keystr(k): tuple(v.shape)
            for k, v in jax.tree_util.tree_leaves_with_path(stored)}
    diffs = [f'{k}: checkpoint {have.get(k, "missing")} vs config {want.get(k, "missing")}'
             for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k)]
    if diffs:
      more = f' (+{len(diffs) - 3} more)' if len(diffs) > 3 else ''
      raise ConfigError(f'checkpoint {self.directory}/{step} {name} does not match the '
                        f'config: {"; ".join(diffs[:3])}{more}')

  def restore(self, step, abstract_params, abstract_opt_state=None):
    """Returns dict(params, opt_state or None, data or None, meta)."""
    present = self.items(step)
    self.check_shapes(step, 'params', abstract_params)
    items = dict(params=ocp.args.StandardRestore(abstract_params), meta=ocp.args.JsonRestore())
    if abstract_opt_state is not None and 'opt_state' in present:
      # Its leaves mirror the params checked above (Orbax stores optax's
      # namedtuples as dicts, so paths would not compare one to one).
      items['opt_state'] = ocp.args.StandardRestore(abstract_opt_state)
    if 'data' in present:
      items['data'] = ocp.args.JsonRestore()
    out = self._manager.restore(step, args=ocp.args.Composite(**items))
    return {name: out[name] if name in items else None
            for name in ('params', 'opt_state', 'data', 'meta')}

  def wait(self):
    self._manager.wait_until_finished()

  def close(self):
    self._manager.close()


def open_step(ckpt):
  """(read-only Manager, step, checkpoints directory) of CKPT: the step it
  names, or a workdir's newest."""
  directory, step = resolve(ckpt)
  manager = Manager(directory, async_save=False, read_only=True)
  step = manager.latest_step() if step is None else step
  if step is None:
    manager.close()
    raise ConfigError(f'no checkpoint in {directory}')
  return manager, step, directory


def restore_params(path, abstract_params):
  """Params of the checkpoint at CKPT `path` (newest step of a workdir)."""
  directory, step = resolve(path)
  manager = Manager(directory, async_save=False, read_only=True)
  step = manager.latest_step() if step is None else step
  if step is None:
    raise ConfigError(f'no checkpoint in {directory}')
  out = manager.restore(step, abstract_params)
  manager.close()
  return out['params'], out['meta']


def abstract_like(tree, shardings=None):
  """ShapeDtypeStructs (with shardings when given) for restoring into."""
  if shardings is None:
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)
  return jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=s), tree, shardings)
