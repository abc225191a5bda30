"""The checkpoints a growth reads (`python -m moe_jax.upcycle --src=...`).

  sources = [Source(src, dst) for src in srcs]   # paths, step, config, tokenizer
  check_distinct(srcs, sources); check_same_architecture(sources)
  params, data_state = sources[0].restore(mesh)

Several sources (merge) must be distinct checkpoints of one architecture and
tokenizer; the first difference is a one-line error. Each is only read, and
--dst may not overlap any of them (moe_jax/containment.py).
"""
import os

from moe_jax import containment, schema
from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.upcycle import paths, transition
from moe_jax.workdir import checkpoint, placement

_SAME_GROUPS = ('model', 'moe')


class Source:
  """One --src: where it is, its config at its step, its tokenizer."""

  def __init__(self, src, dst):
    self.dir, step = checkpoint.resolve(src)
    self.workdir = os.path.dirname(self.dir)
    containment.apart(dst, '--dst', self.workdir, '--src', 'workdir')
    manager = checkpoint.Manager(self.dir, async_save=False, read_only=True)
    try:
      self.step = manager.latest_step() if step is None else step
    finally:
      manager.close()
    if self.step is None:
      raise ConfigError(f'no checkpoint in {self.dir}')
    self.ckpt = os.path.join(self.dir, str(self.step))
    # The source's model at that step (the grown one if it was upcycled in-run).
    self.config = transition.config_at(checkpoint.workdir_config(
        src, ' (--src must be a workdir, or a step inside one)'), self.step)
    self.tokenizer = pipeline.tokenizer_for(self.config, self.workdir, train=False)
    pipeline.resolve_vocab_size(self.config, self.tokenizer)

  def restore(self, mesh):
    """(params, data-stream position) of the checkpoint, sharded on `mesh`."""
    abstract = transition.abstract_params(self.config)
    shardings = placement.param_shardings(abstract, mesh, self.config.mesh)
    manager = checkpoint.Manager(self.dir, async_save=False, read_only=True)
    try:
      out = manager.restore(self.step, checkpoint.abstract_like(abstract, shardings))
    finally:
      manager.close()
    return out['params'], out['data']

  def batches(self, num, data_state=None):
    """The first `num` training batches of the source's data from `data_state`
    (None: the stream's start)."""
    if not num:
      return ()
    it = pipeline.train_iterator(self.config, self.tokenizer)
    if data_state is not None:
      it.set_state(data_state)
    return tuple(next(it) for _ in range(num))


def _flat(d, prefix=''):
  """{'a.b': value} of nested dicts (lists and tuples stay values)."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flat(v, f'{prefix}{k}.'))
    else:
      out[f'{prefix}{k}'] = v
  return out


def _first_difference(flat_a, flat_b):
  """(key, value in a, value in b) of the first key, sorted, whose values
  differ; None if none does."""
  for key in sorted(set(flat_a) | set(flat_b)):
    if repr(flat_a.get(key)) != repr(flat_b.get(key)):
      return key, flat_a.get(key, '(absent)'), flat_b.get(key, '(absent)')
  return None


def _tokenizer_bytes(workdir):
  out = {}
  for name in pipeline.TOKENIZER_FILES:
    path = os.path.join(workdir, name)
    if os.path.exists(path):
      with open(path, 'rb') as f:
        out[name] = f.read()
  return out


def check_same_architecture(sources):
  """ConfigError naming the first difference between source 0 and another:
  a param path or shape, a model/moe config key, or a tokenizer file."""
  first = sources[0]
  shapes = lambda s: {k: tuple(x.shape) for k, x in
                      paths.flatten(transition.abstract_params(s.config)).items()}
  base_shapes = shapes(first)
  for i, s in enumerate(sources[1:], 1):
    diff = _first_difference(base_shapes, shapes(s))
    if diff:
      key, a, b = diff
      raise ConfigError(f'--src {i} ({s.ckpt}) does not share the architecture of --src 0: '
                        f'param {key} has shape {b} there, {a} in --src 0')
    for group in _SAME_GROUPS:
      same = lambda c: {k: v for k, v in _flat(c[group].to_dict()).items()
                        if f'{group}.{k}' not in schema.NUMERICS_KEYS}
      diff = _first_difference(same(first.config), same(s.config))
      if diff:
        key, a, b = diff
        raise ConfigError(f'--src {i} ({s.ckpt}) does not share the architecture of --src 0: '
                          f'{group}.{key}={b!r} there, {a!r} in --src 0')
    ta, tb = _tokenizer_bytes(first.workdir), _tokenizer_bytes(s.workdir)
    for name in sorted(set(ta) | set(tb)):
      if ta.get(name) != tb.get(name):
        raise ConfigError(f'--src {i} ({s.ckpt}) has another tokenizer than --src 0: '
                          f'{name} differs')


def check_distinct(srcs, sources):
  """Refuses two --src that are one checkpoint (the same path twice, a link
  to it, a workdir and its newest step): a merge of a model with itself
  builds experts that are copies, an upcycle the merge recipe is not."""
  seen = {}
  for given, source in zip(srcs, sources):
    real = os.path.realpath(source.ckpt)
    if real in seen:
      raise ConfigError(f'--src names checkpoint {real} twice ({seen[real]} and {given}); '
                        'merge distinct checkpoints (copies of one model are a recipe '
                        'of one source)')
    seen[real] = given
