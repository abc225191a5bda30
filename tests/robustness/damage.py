"""Ways a workdir gets damaged, applied to a private copy by a row's setup."""
import json
import os
import shutil


def _params_data(workdir, step):
  """The largest params data file of a step (where most bytes of an array live)."""
  directory = os.path.join(workdir, 'checkpoints', str(step), 'params', 'ocdbt.process_0', 'd')
  return max((os.path.join(directory, n) for n in os.listdir(directory)), key=os.path.getsize)


def zeros_in_params(workdir, step, offset=4096, size=4096):
  """4 KiB of zeros written into the params data file (issue 12's case)."""
  with open(_params_data(workdir, step), 'r+b') as f:
    f.seek(offset)
    f.write(b'\0' * size)


def truncate_params(workdir, step):
  path = _params_data(workdir, step)
  os.truncate(path, os.path.getsize(path) // 2)


def params_of_another_step(workdir, step, other):
  """Step `step` holding step `other`'s params (valid files, other values)
  under its own meta: only the digests can tell."""
  target = os.path.join(workdir, 'checkpoints', str(step), 'params')
  shutil.rmtree(target)
  shutil.copytree(os.path.join(workdir, 'checkpoints', str(other), 'params'), target)


def remove(workdir, relpath):
  path = os.path.join(workdir, relpath)
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path)
  else:
    os.remove(path)


def write(workdir, relpath, data):
  path = os.path.join(workdir, relpath)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb' if isinstance(data, bytes) else 'w') as f:
    f.write(data)


def edit_json(workdir, relpath, edit):
  path = os.path.join(workdir, relpath)
  with open(path) as f:
    record = json.load(f)
  edit(record)
  with open(path, 'w') as f:
    json.dump(record, f)


def lm_head_filled(workdir, step, new_step, value):
  """A new step `new_step` holding step `step`'s params with lm_head filled
  with `value`, its digests recorded as saved (so only the finiteness checks
  can tell: NaN params, or finite ones whose loss overflows)."""
  import jax   # pylint: disable=g-import-not-at-top
  import numpy as np   # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp   # pylint: disable=g-import-not-at-top
  from moe_jax.workdir import checkpoint   # pylint: disable=g-import-not-at-top
  directory = os.path.join(workdir, 'checkpoints')
  params = ocp.StandardCheckpointer().restore(os.path.join(directory, str(step), 'params'))
  params = jax.tree_util.tree_map(np.asarray, params)
  params['lm_head'] = np.full_like(params['lm_head'], value)
  manager = checkpoint.Manager(directory, async_save=False)
  manager.save(new_step, params, meta={})
  manager.close()
