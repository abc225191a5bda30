"""Orbax checkpoints: one step directory holds params, optimizer state, the
data iterator's state and a small JSON `meta` (step, config, provenance).

Items are separate so callers restore only what they need: `init_from` and
the evaluator read `params` alone, the upcycle CLI `params` and `data`; the
step-0 checkpoint it writes has no `opt_state` (the trainer starts one fresh)
and the source's `data` position, if it had one (the trainer continues the
stream there).

Orbax writes each step to a temporary directory and renames it on commit, so a
step directory is complete or absent; a crash mid-save leaves the previous one.
What the disk does to a step after that is caught on restore: `meta` records a
digest of every saved array (workdir/digest.py) and restoring verifies them,
so a damaged step is a CorruptCheckpointError naming it, never NaN params; so
is a step missing an item it was saved with (the digests name them all), never
resumed half.
"""
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from moe_jax import schema
from moe_jax.errors import ConfigError, CorruptCheckpointError, SaveError
from moe_jax.workdir import digest, files



def _is_step(path):
  """A digit-named directory Orbax wrote (complete or damaged)."""
  return os.path.basename(path).isdigit() and any(
      os.path.exists(os.path.join(path, name)) for name in ('params', '_CHECKPOINT_METADATA'))


def resolve(path):
  """CKPT argument -> (checkpoints directory, step or None for the newest).

  Accepts a workdir (has checkpoints/), a checkpoints directory, or one step
  directory inside it, through symbolic links too (real paths are returned).
  """
  path = os.path.realpath(os.path.expanduser(path))
  if not os.path.exists(path):
    raise ConfigError(f'checkpoint path {path} does not exist')
  if not os.path.isdir(path):
    raise ConfigError(f'checkpoint path {path} is not a directory')
  if os.path.isdir(os.path.join(path, files.CHECKPOINTS)):
    return os.path.join(path, files.CHECKPOINTS), None
  if _is_step(path):
    return os.path.dirname(path), int(os.path.basename(path))
  if os.path.basename(path).isdigit():
    raise ConfigError(f'{path} is not a checkpoint step (it holds no params)')
  steps = sorted(d for d in os.listdir(path) if d.isdigit())
  if any(_is_step(os.path.join(path, d)) for d in steps):
    return path, None
  if steps:
    raise ConfigError(f'{path} holds no checkpoint: its step directories '
                      f'({", ".join(steps[:3])}) hold no params')
  raise ConfigError(f'{path} is neither a workdir, a checkpoints directory nor a step directory')


def workdir_config(ckpt, hint=''):
  """The config a checkpoint was trained with (its workdir's config.json);
  `hint` closes the message when it is missing."""
  directory, _ = resolve(ckpt)
  path = os.path.join(os.path.dirname(directory), files.CONFIG)
  if not os.path.exists(path):
    raise ConfigError(f'{path} is missing{hint}')
  return files.read_config(os.path.dirname(directory))


def _first_line(error):
  """The root cause's first line: TensorStore's says which array and why,
  the Orbax exceptions wrapping it only where it was read."""
  while error.__cause__ is not None:
    error = error.__cause__
  lines = str(error).strip().splitlines()
  return lines[0] if lines else type(error).__name__


class Manager:
  """A thin CheckpointManager over a workdir's checkpoints/ directory: saves
  record digests, restores verify them, and failures are one-line errors."""

  def __init__(self, directory, keep=2, keep_every=0, async_save=True, read_only=False):
    # Orbax's own read_only mode warns on every open; not creating is enough.
    options = ocp.CheckpointManagerOptions(
        max_to_keep=None if read_only else keep or None, keep_period=keep_every or None,
        create=not read_only, cleanup_tmp_directories=not read_only,
        enable_async_checkpointing=async_save)
    self.directory = directory
    self._in_flight = None
    handlers = dict(params=ocp.StandardCheckpointHandler(), meta=ocp.JsonCheckpointHandler(),
                    opt_state=ocp.StandardCheckpointHandler(), data=ocp.JsonCheckpointHandler())
    self._manager = ocp.CheckpointManager(directory, options=options, item_handlers=handlers)

  @classmethod
  def for_workdir(cls, workdir, ckpt_cfg):
    return cls(os.path.join(workdir, files.CHECKPOINTS), ckpt_cfg.keep, ckpt_cfg.keep_every,
               ckpt_cfg.async_save)

  def latest_step(self):
    return self._manager.latest_step()

  def steps(self):
    return sorted(self._manager.all_steps())

  def items(self, step):
    try:
      return set(os.listdir(os.path.join(self.directory, str(step))))
    except OSError as e:
      raise CorruptCheckpointError(f'checkpoint {self.directory}/{step} cannot be read '
                                   f'({e.strerror})') from None

  def _save_error(self, step, error):
    complete = sorted(int(d) for d in os.listdir(self.directory) if d.isdigit() and
                      int(d) != step) if os.path.isdir(self.directory) else []
    kept = (f'the newest complete checkpoint is step {complete[-1]}' if complete else
            'no checkpoint was completed before it')
    return SaveError(f'saving checkpoint {self.directory}/{step} failed '
                     f'({_first_line(error)}); {kept}')

  def save(self, step, params, opt_state=None, data_state=None, meta=None):
    self.wait()   # a failed asynchronous save surfaces here, named by its step
    trees = dict(params=params, opt_state=opt_state)
    digests = {name: digest.of_tree(tree) for name, tree in trees.items() if tree is not None}
    if data_state is not None:
      digests['data'] = digest.of_json(data_state)
    items = dict(params=ocp.args.StandardSave(params), meta=ocp.args.JsonSave(dict(
        meta or {}, step=int(step), digests=dict(digests, algorithm=digest.ALGORITHM))))
    if opt_state is not None:
      items['opt_state'] = ocp.args.StandardSave(opt_state)
    if data_state is not None:
      items['data'] = ocp.args.JsonSave(data_state)
    try:
      self._manager.save(int(step), args=ocp.args.Composite(**items), force=True)
    except Exception as e:  # pylint: disable=broad-except
      raise self._save_error(int(step), e) from e
    self._in_flight = int(step)

  def check_shapes(self, step, name, abstract):
    """Refuses a stored tree whose leaves differ from `abstract` in path or shape.

    Some Orbax restore paths silently take the stored shape; a checkpoint of
    another model must fail here, by name, before anything is restored.
    """
    where = f'checkpoint {self.directory}/{step}: the {name} metadata'
    # Orbax only warns when an item's _METADATA is gone, and reports no leaves.
    if not os.path.exists(os.path.join(self.directory, str(step), name, '_METADATA')):
      raise CorruptCheckpointError(f'{where} is missing')
    try:
      stored = self._manager.item_metadata(step)[name]
    except Exception as e:  # pylint: disable=broad-except
      raise CorruptCheckpointError(f'{where} cannot be read ({_first_line(e)})') from e
    stored = getattr(stored, 'tree', stored)
    if stored is None:
      raise CorruptCheckpointError(f'{where} cannot be read')
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

  def matches(self, step, abstract):
    """Whether the stored params of `step` have the paths and shapes of `abstract`."""
    try:
      self.check_shapes(step, 'params', abstract)
    except ConfigError:
      return False
    return True

  def restore(self, step, abstract_params, abstract_opt_state=None):
    """Returns dict(params, opt_state or None, data or None, meta), verified
    against the digests in meta: a CorruptCheckpointError names the step and
    the first damaged item otherwise. The config in meta is upgraded
    (schema.upgrade) like config.json."""
    where = f'checkpoint {self.directory}/{step}'
    present = self.items(step)
    missing = [name for name in ('params', 'meta') if name not in present]
    if missing:
      raise CorruptCheckpointError(f'{where} is incomplete: no {" or ".join(missing)}')
    self.check_shapes(step, 'params', abstract_params)
    items = dict(params=ocp.args.StandardRestore(abstract_params), meta=ocp.args.JsonRestore())
    if abstract_opt_state is not None and 'opt_state' in present:
      # Its leaves mirror the params checked above (Orbax stores optax's
      # namedtuples as dicts, so paths would not compare one to one).
      items['opt_state'] = ocp.args.StandardRestore(abstract_opt_state)
    if 'data' in present:
      items['data'] = ocp.args.JsonRestore()
    try:
      out = self._manager.restore(step, args=ocp.args.Composite(**items))
    except Exception as e:  # pylint: disable=broad-except
      raise CorruptCheckpointError(f'{where} cannot be read ({_first_line(e)})') from e
    out = {name: out[name] if name in items else None
           for name in ('params', 'opt_state', 'data', 'meta')}
    _verify(where, out)
    _complete(where, out['meta'], present)
    if isinstance(out['meta'].get('config'), dict):   # the config it was saved under
      schema.upgrade(out['meta']['config'])
    return out

  def wait(self):
    """Waits for an asynchronous save; its failure is a SaveError naming the step."""
    step, self._in_flight = self._in_flight, None
    try:
      self._manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      raise self._save_error(step, e) from e

  def close(self):
    self._manager.close()


def _verify(where, out):
  """Checks restored items against the digests their step recorded (a step
  saved before digests existed is checked for non-finite values only)."""
  meta = out['meta']
  if not isinstance(meta, dict):
    raise CorruptCheckpointError(f'{where}: meta is not a JSON object')
  recorded = meta.get('digests')
  if recorded is not None and (not isinstance(recorded, dict) or
                               recorded.get('algorithm') != digest.ALGORITHM):
    raise CorruptCheckpointError(f'{where}: meta holds digests this version cannot check')
  for name in ('params', 'opt_state'):
    if out[name] is not None:
      digest.check_tree(where, name, out[name],
                        None if recorded is None else recorded.get(name, {}))
  if out['data'] is not None and recorded is not None and (
      digest.of_json(out['data']) != recorded.get('data')):
    raise CorruptCheckpointError(f'{where}: the data iterator state does not match its digest')


def _complete(where, meta, present):
  """Refuses a step that lacks an item it was saved with (meta's digests name
  every saved item): resuming would start a fresh optimizer or the data
  stream's beginning, silently. An item never saved (the upcycle CLI's step 0
  has no opt_state) is no loss; a step saved before digests cannot tell."""
  lost = [name for name in ('opt_state', 'data') if name in (meta.get('digests') or {})
          and name not in present]
  if lost:
    raise CorruptCheckpointError(f'{where} is incomplete: its {" and ".join(lost)} was saved '
                                 'and is gone')


def newest_step(ckpt):
  """(step, checkpoints directory) of CKPT, the step it names or a workdir's
  newest, from the directory listing alone: no Orbax manager, so no JAX
  backend starts (config files call this while flags are parsed, before
  moe_jax.main sets XLA_FLAGS: moe_jax/xla_flags.py). Orbax renames a step
  directory to its number only once the step is complete."""
  directory, step = resolve(ckpt)
  if step is None:
    steps = [int(d) for d in os.listdir(directory)
             if d.isdigit() and _is_step(os.path.join(directory, d))]
    if not steps:
      raise ConfigError(f'no checkpoint in {directory}')
    step = max(steps)
  return step, directory


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
  manager, step, _ = open_step(path)
  try:
    out = manager.restore(step, abstract_params)
  finally:
    manager.close()
  return out['params'], out['meta']


def abstract_like(tree, shardings=None):
  """ShapeDtypeStructs (with shardings when given) for restoring into."""
  if shardings is None:
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)
  return jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=s), tree, shardings)
