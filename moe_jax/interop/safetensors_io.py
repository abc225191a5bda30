"""safetensors files and transformers checkpoint directories, without torch.

Reading is our own: the format is an 8-byte header length, a JSON header and
raw little-endian arrays, and the `safetensors` package's numpy loader has no
bfloat16, the dtype most public checkpoints ship in. Files are memory-mapped,
so a tensor is read from disk when it is converted. Writing uses the package.
Nothing here unpickles: a directory of `pytorch_model.bin` files is refused.
"""
import json
import math
import os
import struct

import ml_dtypes
import numpy as np
import safetensors.numpy

from moe_jax import containment
from moe_jax.errors import ConfigError, RunError
from moe_jax.workdir import files

INDEX = 'model.safetensors.index.json'
SINGLE = 'model.safetensors'
_DTYPES = {'F64': np.float64, 'F32': np.float32, 'F16': np.float16, 'BF16': ml_dtypes.bfloat16,
           'I64': np.int64, 'I32': np.int32, 'I16': np.int16, 'I8': np.int8, 'U8': np.uint8,
           'BOOL': np.bool_}


def read_file(path):
  """{name: array} of one .safetensors file (memory-mapped, read-only)."""
  size = os.path.getsize(path)
  with open(path, 'rb') as f:
    head = f.read(8)
    length = struct.unpack('<Q', head)[0] if len(head) == 8 else None
    if length is None or 8 + length > size:
      raise ConfigError(f'{path} is truncated: its header runs past the end of the file')
    try:
      header = json.loads(f.read(length))
    except ValueError as e:
      raise ConfigError(f'{path} has an unreadable safetensors header ({e})') from e
  if not isinstance(header, dict):
    raise ConfigError(f'{path}: the safetensors header is a JSON {type(header).__name__}, '
                      'not an object')
  header.pop('__metadata__', None)
  data = (np.memmap(path, np.uint8, 'r', offset=8 + length) if size > 8 + length
          else np.zeros(0, np.uint8))
  out = {}
  for name, info in header.items():
    if not isinstance(info, dict):
      raise ConfigError(f'{path}: tensor {name} has a header entry {info!r}, not an object')
    dtype = _DTYPES.get(info.get('dtype'))
    if dtype is None:
      raise ConfigError(f'{path}: tensor {name} has dtype {info.get("dtype")!r}, not one of '
                        f'{sorted(_DTYPES)}')
    offsets, shape = info.get('data_offsets'), info.get('shape')
    if not (_ints(offsets) and len(offsets) == 2 and offsets[0] <= offsets[1] and _ints(shape)):
      raise ConfigError(f'{path}: tensor {name} has data_offsets={offsets!r} and shape='
                        f'{shape!r}, not two ordered integers >= 0 and a list of them')
    begin, end = offsets
    shape = tuple(shape)
    if end > len(data) or end - begin != math.prod(shape) * np.dtype(dtype).itemsize:
      raise ConfigError(f'{path} is truncated or corrupt: tensor {name} {shape} {info["dtype"]} '
                        f'does not fit bytes {begin}..{end} of {len(data)}')
    out[name] = data[begin:end].view(dtype).reshape(shape)
  return out


def _ints(values):
  return isinstance(values, list) and all(
      isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def _shard(path, name):
  """`name` of the index's weight_map, a file inside the checkpoint directory
  `path` (after resolving links): an entry cannot make us open /etc/passwd."""
  if not isinstance(name, str) or not name:
    raise ConfigError(f'{path}/{INDEX}: weight_map entry {name!r} is not a file name')
  real = os.path.realpath(path)
  if not containment.within(os.path.realpath(os.path.join(path, name)), real):
    raise ConfigError(f'{path}/{INDEX}: weight_map entry {name!r} points outside --src')
  return name


def read_dir(path):
  """(config.json dict, {tensor name: array}) of a transformers checkpoint directory,
  sharded (with model.safetensors.index.json) or not."""
  config = files.read_json(os.path.join(path, 'config.json'))
  index = os.path.join(path, INDEX)
  if os.path.isfile(index):
    weight_map = files.read_json(index).get('weight_map') or {}
    if not isinstance(weight_map, dict):
      raise ConfigError(f'{index}: weight_map is a {type(weight_map).__name__}, not an object')
    shards = sorted({_shard(path, f) for f in weight_map.values()})
    missing = [f for f in shards if not os.path.isfile(os.path.join(path, f))]
    if missing:
      raise ConfigError(f'{path}: shard(s) {", ".join(missing)} listed in {INDEX} are missing')
  else:
    shards = sorted(f for f in os.listdir(path) if f.endswith('.safetensors'))
    if not shards:
      raise ConfigError(f'{path} has no *.safetensors files (pickled .bin checkpoints are not '
                        'read; save the model with safe_serialization)')
    weight_map = None
  tensors = {}
  for name in shards:
    shard = read_file(os.path.join(path, name))
    if weight_map is not None:
      listed = {t for t, f in weight_map.items() if f == name}
      lacking, extra = sorted(listed - set(shard)), sorted(set(shard) - listed)
      if lacking or extra:
        raise ConfigError(f'{path}/{name} does not match {INDEX}: '
                          + (f'lacks {", ".join(lacking[:3])}' if lacking else
                             f'has unlisted {", ".join(extra[:3])}'))
    repeated = sorted(set(shard) & set(tensors))
    if repeated:
      raise ConfigError(f'{path}: tensor {repeated[0]} is in more than one file')
    tensors.update(shard)
  return config, tensors


def write_file(path, tensors):
  """One model.safetensors (the metadata transformers checks for); a write
  that fails (a full disk) is a RunError naming the file, where safetensors
  raises its own error, no OSError."""
  try:
    safetensors.numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path,
                                metadata={'format': 'pt'})
  except safetensors.SafetensorError as e:
    raise RunError(f'{path}: cannot write ({str(e).strip().splitlines()[0]})') from None
