"""Many checkpoints to one: what `python -m moe_jax.upcycle` does for the
merge recipe (recipes/merge.py), `--src=A,B[,C...]`.

  check every source (paths, same architecture: param shapes, then the model
  and moe config groups, then the tokenizer files; the first difference is a
  one-line error) -> restore each -> router rows from each source's own
  training batches (router=hidden | domain) -> one jitted, sharded map over
  the tree {src_0: params_0, src_1: ...} (the strict mapping sees every
  source leaf) -> per source: its loss on its own validation batches before
  and after, max |delta logits| there, and the share of its tokens routed to
  its experts -> a new workdir at --dst, as run.py writes one.

Lineage: the chain of source 0 grows by one stage whose origin names every
source in `parents` and carries the other sources' own records in
`parent_lineages`, so each parent's history prints from the child alone. The
merged model starts a fresh data stream (each source read its own). Nothing
is written before every check has passed; --dst appears whole or not at all.
"""
import os

import jax

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.upcycle import mapping, merge_router, paths, recipes, run, transition
from moe_jax.upcycle.recipes import merge as merge_recipe
from moe_jax.workdir import checkpoint, containment, lineage, placement, run_record, staging

_SAME_GROUPS = ('model', 'moe')


class _Source:
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
    self.config = transition.config_at(checkpoint.workdir_config(
        src, ' (--src must be a workdir, or a step inside one)'), self.step)
    self.tokenizer = pipeline.tokenizer_for(self.config, self.workdir, train=False)
    pipeline.resolve_vocab_size(self.config, self.tokenizer)

  def restore(self, mesh):
    abstract = transition.abstract_params(self.config)
    shardings = placement.param_shardings(abstract, mesh, self.config.mesh)
    manager = checkpoint.Manager(self.dir, async_save=False, read_only=True)
    try:
      return manager.restore(self.step, checkpoint.abstract_like(abstract, shardings))['params']
    finally:
      manager.close()


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
      diff = _first_difference(_flat(first.config[group].to_dict()),
                               _flat(s.config[group].to_dict()))
      if diff:
        key, a, b = diff
        raise ConfigError(f'--src {i} ({s.ckpt}) does not share the architecture of --src 0: '
                          f'{group}.{key}={b!r} there, {a!r} in --src 0')
    ta, tb = _tokenizer_bytes(first.workdir), _tokenizer_bytes(s.workdir)
    for name in sorted(set(ta) | set(tb)):
      if ta.get(name) != tb.get(name):
        raise ConfigError(f'--src {i} ({s.ckpt}) has another tokenizer than --src 0: '
                          f'{name} differs')


def _router_rows(sources, params, a, seed):
  """{layer: [D, n*g]} for router=hidden | domain, from the first
  `router_batches` training batches of each source's own data."""
  inputs = []
  for s, p in zip(sources, params):
    it = pipeline.train_iterator(s.config, s.tokenizer)
    batches = [next(it) for _ in range(a['router_batches'])]
    inputs.append(merge_router.router_inputs(s.config, p, batches))
  g = a['experts_per_source']
  if a['router'] == 'hidden':
    return merge_router.hidden_rows(inputs, g)
  return merge_router.domain_rows(inputs, g, a['domain_steps'], a['domain_lr'], seed)


def _check_distinct(srcs, sources):
  """Refuses two --src that are one checkpoint (the same path twice, a link
  to it, a workdir and its newest step): a merge of a model with itself
  builds experts that are copies, an upcycle the merge recipe is not."""
  seen = {}
  for given, source in zip(srcs, sources):
    real = os.path.realpath(source.ckpt)
    if real in seen:
      raise ConfigError(f'--src names checkpoint {real} twice ({seen[real]} and {given}); '
                        'merge distinct checkpoints (for copies of one model, use '
                        'configs/upcycle/dense_to_moe.py)')
    seen[real] = given


def merge_checkpoints(up_config, srcs, dst, overwrite=False):
  """Merges the dense checkpoints `srcs` by `up_config` (an `upcycle` group
  with recipe merge) into a new workdir `dst`; returns the report."""
  if len(srcs) < 2 or not all(srcs):
    raise ConfigError(f'merge needs --src=A,B[,...]: at least 2 non-empty paths, got '
                      f'{",".join(srcs)!r}')
  sources = [_Source(s, dst) for s in srcs]
  _check_distinct(srcs, sources)
  dst = staging.check(dst, overwrite, '--dst')
  check_same_architecture(sources)
  config = sources[0].config.copy_and_resolve_references()
  config.upcycle = up_config
  config.upcycle.step = 0
  if config.upcycle.args.get('num_sources', len(sources)) != len(sources):
    raise ConfigError(f'upcycle.args.num_sources={config.upcycle.args.num_sources} but '
                      f'--src names {len(sources)} sources')
  with config.upcycle.args.unlocked():   # the config file cannot know it
    config.upcycle.args.num_sources = len(sources)
  a = recipes.resolve('merge', config.upcycle.args)
  dst_config = transition.target_config(config)
  recipes.build('merge', config, dst_config, dict(a, router_rows={}))   # args, before restoring

  mesh = placement.make_mesh(config.mesh)
  params = [s.restore(mesh) for s in sources]
  up = config.upcycle
  rows = _router_rows(sources, params, a, up.seed) if a['router'] != 'random' else None
  recipe = recipes.build('merge', config, dst_config, dict(a, router_rows=rows))
  tree = {merge_recipe.source_prefix(i): p for i, p in enumerate(params)}
  dst_abstract = transition.abstract_params(dst_config)
  dst_params = mapping.transform(recipe, tree, dst_abstract, jax.random.key(up.seed),
                                 placement.param_shardings(dst_abstract, mesh, config.mesh))

  per_source = []
  for i, (s, p) in enumerate(zip(sources, params)):
    batches = pipeline.eval_batches(s.config, s.tokenizer)[:up.report_batches]
    r = transition.preservation_report(s.config, dst_config, p, dst_params, batches)
    r['own_share'] = merge_router.own_share(dst_config, dst_params, batches, i,
                                            a['experts_per_source'])
    run.check_report(r, f'--src {i} ({s.ckpt})')
    per_source.append(dict(r, source=s.ckpt))
  tokens = sum(r['tokens'] for r in per_source)
  mean = lambda k: sum(r[k] * r['tokens'] for r in per_source) / tokens
  summary = dict(loss_before=mean('loss_before'), loss_after=mean('loss_after'),
                 max_abs_dlogits=max(r['max_abs_dlogits'] for r in per_source), tokens=tokens)
  report = dict(summary, sources=per_source, recipe=recipe.describe(), seed=up.seed)

  dst_config.upcycle.source = sources[0].ckpt
  run_info = run_record.build(dst_config, source=run_record.source_info(sources[0].ckpt))
  origin = lineage.origin(
      'upcycle', dict(checkpoint=sources[0].ckpt, step=sources[0].step), up.seed,
      report=summary, parents=[dict(checkpoint=s.ckpt, step=s.step) for s in sources],
      parent_lineages=[lineage.at_checkpoint(s.ckpt)[0] for s in sources[1:]],
      **transition.provenance(config, recipe))
  history = lineage.grow(*lineage.at_checkpoint(sources[0].ckpt), lineage.stage(
      dst, 0, run_info['tokens_per_step'], run_info['model'], origin))

  # The tokenizer files are the same in every source (checked); the merged
  # model starts a fresh data stream.
  run.write_workdir(dst, sources[0].workdir, dst_config, report, run_info, history, dst_params,
                    dict(upcycled_from=[s.ckpt for s in sources], recipe='merge', seed=up.seed))
  return report
