"""A config file's sweep made into named, checked, ordered runs.

`plan(spec)` loads `path[:arg]`, calls its `get_config(arg)` and (if defined)
`get_hyper(hyper)` and checks every point before anything is written: keys
exist in the config, values have the config's types, run names are unique,
parents exist and form no cycle, and a parent keeps every checkpoint a child
starts from. A sweep directory holds `sweep.json` (the config and the runs in
the order they may start) and one directory per run with `overrides.json`
(its point); `run.py` turns those into commands.
"""
import dataclasses
import hashlib
import importlib.util
import inspect
import json
import os
import re

from experiments import hyper
from moe_jax.errors import ConfigError
from moe_jax.schema import upcycle as upcycle_schema
from moe_jax.workdir import files

SWEEP_FILE, OVERRIDES_FILE = 'sweep.json', 'overrides.json'
RESERVED = ('plots', 'report.md', SWEEP_FILE)   # what a sweep directory holds besides runs
MAX_NAME = 80
REF = re.compile(r'\{run:([^}]*)\}')
_STEP_REF = re.compile(r'\{run:([^}]*)\}/checkpoints/(\d+)/?')
_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._=@+-]*')
_UNSAFE = re.compile(r'[^A-Za-z0-9._=@+-]')
_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Run:
  name: str
  overrides: dict   # the sweep point: key -> value
  parents: tuple    # runs of the sweep it starts from


def plan(spec):
  """`path[:arg]` -> (absolute spec, runs in an order that starts parents first)."""
  spec, config, points = _load(spec)
  if not isinstance(points, list) or not points or not all(isinstance(p, dict) for p in points):
    raise ConfigError(f'{spec}: get_hyper must return a non-empty list of dicts (points)')
  configs = [_apply(config, p) for p in points]
  names = _names(points)
  # Imported here: it imports JAX, which a run's driver (experiments.run, one
  # process per run, which reads the sweep but plans nothing) does not need.
  from moe_jax.upcycle import transition  # pylint: disable=g-import-not-at-top
  from moe_jax.workdir import config_check  # pylint: disable=g-import-not-at-top
  for name, c in zip(names, configs):   # the trainer's own checks, before any run starts
    c = c.copy_and_resolve_references()
    if REF.search(str(c.init_from)):   # another run's checkpoint: it exists once that run ran
      c.init_from = ''
    try:
      config_check.check_run(c)
      if c.upcycle.step:   # the model the in-run transition grows, checked at the run's start
        transition.target_config(c)
    except ConfigError as e:
      raise ConfigError(f'run {name!r}: {e}') from None
  runs = [Run(n, p, tuple(dict.fromkeys(_refs(p)))) for n, p in zip(names, points)]
  by_name = {r.name: (r, c) for r, c in zip(runs, configs)}
  for r in runs:
    _check_parents(r, by_name)
  return spec, _topological(runs)


def varying(points):
  """Keys whose value differs between points (or that some points lack), in order."""
  keys = dict.fromkeys(k for p in points for k in p)
  return [k for k in keys if len({repr(p.get(k, _MISSING)) for p in points}) > 1]


def labels(keys):
  """Short column and name labels: the last components that tell the keys apart."""
  parts = {k: k.removeprefix('config.').split('.') for k in keys}
  depth = dict.fromkeys(keys, 1)
  while True:
    out = {k: '.'.join(parts[k][-depth[k]:]) for k in keys}
    clash = [k for k in keys if list(out.values()).count(out[k]) > 1 and depth[k] < len(parts[k])]
    if not clash:
      return out
    for k in clash:
      depth[k] += 1


def flag(key, value):
  """The command-line flag of a `config.<path>` point entry."""
  if isinstance(value, bool):
    text = str(value).lower()
  elif isinstance(value, (tuple, list)):
    text = repr(tuple(value))
  else:
    text = str(value)
  return f'--{key}={text}'


def resolve(value, sweep_dir):
  """`{run:NAME}` -> that run's directory."""
  if not isinstance(value, str):
    return value
  return REF.sub(lambda m: os.path.join(sweep_dir, m.group(1)), value)


def check_workdir(workdir, spec, runs):
  """Refuses a directory that is a file, or holds another sweep's runs."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ConfigError(f'--workdir={workdir} is a file')
  saved = read_json(os.path.join(workdir, SWEEP_FILE))
  if saved and saved['config'] != spec:
    raise ConfigError(f'--workdir={workdir} holds a sweep of --config={saved["config"]}, '
                      f'not {spec}; use another --workdir')
  for r in runs:
    old = read_json(os.path.join(workdir, r.name, OVERRIDES_FILE))
    if old is not None and old != json.loads(json.dumps(r.overrides)):
      raise ConfigError(f'run {r.name!r} in {workdir} was launched with other overrides '
                        f'({old}); use another --workdir or another name')


def write(workdir, spec, runs):
  for r in runs:
    os.makedirs(os.path.join(workdir, r.name), exist_ok=True)
    files.write_json(os.path.join(workdir, r.name, OVERRIDES_FILE), r.overrides)
  files.write_json(os.path.join(workdir, SWEEP_FILE), dict(config=spec, runs=[
      dict(name=r.name, overrides=r.overrides, parents=list(r.parents)) for r in runs]))


def read(workdir):
  """sweep.json: {'config': spec, 'runs': [{'name', 'overrides', 'parents'}, ...]}."""
  saved = read_json(os.path.join(workdir, SWEEP_FILE))
  if saved is None:
    raise ConfigError(f'{workdir} has no {SWEEP_FILE}: launch the sweep first')
  return saved


def repo_spec(sweep_dir):
  """The --config a sweep was launched with, as the repository names it (the
  launcher saves it resolved; a results file committed to docs names no path
  of one machine), or None where `sweep_dir` is no launched sweep."""
  spec = (read_json(os.path.join(sweep_dir, SWEEP_FILE)) or {}).get('config')
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return os.path.relpath(spec, repo) if spec and spec.startswith(repo + os.sep) else spec


def read_json(path, default=None):
  """The JSON object at `path`, or `default` when there is no file."""
  return files.read_json(path) if os.path.exists(path) else default


def _load(spec):
  path, colon, arg = spec.partition(':')
  path = os.path.abspath(os.path.expanduser(path))
  spec = path + colon + arg
  if not os.path.isfile(path):
    raise ConfigError(f'--config={spec}: no such file')
  try:
    loader = importlib.util.spec_from_file_location('_sweep_config', path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    config = module.get_config(arg) if colon else module.get_config()
    get_hyper = getattr(module, 'get_hyper', None)
    if get_hyper is None:
      return spec, config, [{}]
    with_arg = len(inspect.signature(get_hyper).parameters) > 1
    return spec, config, get_hyper(hyper, arg or None) if with_arg else get_hyper(hyper)
  except ConfigError:
    raise
  except Exception as e:  # the config file's own error, e.g. a bad argument
    raise ConfigError(f'--config={spec}: {e}') from e


def _apply(config, point):
  """The config of one point; a key the config lacks or a value of another type is an error."""
  config = config.copy_and_resolve_references()
  for key, value in point.items():
    if not isinstance(key, str):
      raise ConfigError(f'sweep key {key!r} is not a string')
    if not key.startswith('config.'):
      if key not in hyper.LAUNCHER_KEYS:
        raise ConfigError(f'sweep key {key!r} is neither config.<path> nor one of '
                          f'{", ".join(hyper.LAUNCHER_KEYS)}')
      _check_launcher_value(key, value, point)
      continue
    *groups, leaf = key.split('.')[1:]
    node = config
    for g in groups:
      node = node.get(g) if hasattr(node, 'get') else None
    if not hasattr(node, 'get') or leaf not in node:
      raise ConfigError(f'sweep key {key!r} is not a config key')
    _check_type(key, node[leaf], value)
    node[leaf] = value
  if (hyper.UPCYCLE_CONFIG in point) != (hyper.UPCYCLE_SRC in point):
    raise ConfigError(f'a point sets only one of {hyper.UPCYCLE_CONFIG}, {hyper.UPCYCLE_SRC}: '
                      f'{point}')
  starts = [k for k in (hyper.RESUME_FROM, hyper.UPCYCLE_SRC, 'config.init_from') if point.get(k)]
  if len(starts) > 1:
    raise ConfigError(f'a point starts from two places ({", ".join(starts)}): {point}')
  return config


# The free-form dicts of the upcycle group (a recipe's args, the target's
# overrides): a point's dict replaces one whole, as its flag does (a config
# holding two recipes' transitions gives each point its recipe's args).
_DICTS = tuple(f'config.upcycle.{f.name}' for f in dataclasses.fields(upcycle_schema.UpcycleConfig)
               if f.type is dict)


def _check_type(key, old, new):
  if key in _DICTS:
    if not isinstance(new, dict):
      raise ConfigError(f'sweep value {key}={new!r} is a {type(new).__name__}; the config '
                        'holds a dict there, which a point replaces whole')
    return
  kinds = (bool, int, float, str, tuple)
  if not isinstance(old, kinds):
    raise ConfigError(f'{key} holds a {type(old).__name__}, which a flag can not override')
  if isinstance(old, bool) or isinstance(new, bool):
    ok = isinstance(old, bool) and isinstance(new, bool)
  elif isinstance(old, float):
    ok = isinstance(new, (int, float))
  elif isinstance(old, tuple):
    ok = isinstance(new, (tuple, list))
  else:
    ok = isinstance(new, type(old))
  if not ok:
    raise ConfigError(f'sweep value {key}={new!r} is a {type(new).__name__}; the config holds '
                      f'a {type(old).__name__} ({old!r})')


def _check_launcher_value(key, value, point):
  if not isinstance(value, str):
    raise ConfigError(f'sweep value {key}={value!r} must be a string')
  if key == hyper.NAME and (not _NAME.fullmatch(value) or len(value) > MAX_NAME or
                            value in RESERVED):
    raise ConfigError(f'run name {value!r} must be 1-{MAX_NAME} of [A-Za-z0-9._=@+-], start '
                      f'with a letter or digit, and not be one of {RESERVED}')
  if key == hyper.RESUME_FROM and not _STEP_REF.fullmatch(value):
    raise ConfigError(f'{key}={value!r} must name a checkpoint of a run of the sweep: '
                      "hyper.run(NAME, step=S), i.e. '{run:NAME}/checkpoints/S'")
  if key == hyper.UPCYCLE_CONFIG:
    for part in value.split(hyper.CHAIN):
      path = os.path.expanduser(part.strip().partition(':')[0])
      if not os.path.isfile(path):
        raise ConfigError(f'{key}={value!r}: no such file {path} (point {point})')
  if key == hyper.EVAL_CKPT and (hyper.EVAL_ARGS not in point or any(
      k in point for k in (hyper.RESUME_FROM, hyper.UPCYCLE_SRC, 'config.init_from'))):
    raise ConfigError(f'{key} evaluates a checkpoint and trains nothing: the point needs '
                      f'{hyper.EVAL_ARGS} and nothing that starts a training run ({point})')
  if key == hyper.EVAL_ARGS and any('--ckpt' in a or '--out' in a for a in value.split()):
    raise ConfigError(f'{key}={value!r}: the launcher sets --ckpt and --out')


def _names(points):
  """Explicit `name`s, else `key=value` of the keys that vary between unnamed points."""
  unnamed = [p for p in points if hyper.NAME not in p]
  keys = [k for k in varying(unnamed) if k != hyper.NAME]
  label = labels(keys)
  names, first = [], {}
  for i, p in enumerate(points):
    name = p.get(hyper.NAME) or '_'.join(
        f'{label[k]}={_UNSAFE.sub("-", short(p[k]))}' for k in keys if k in p) or 'run'
    if len(name) > MAX_NAME:
      name = f'{name[:MAX_NAME - 9]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}'
    if name in first:
      raise ConfigError(f'points {first[name] + 1} and {i + 1} of the sweep share the run name '
                        f'{name!r}; give them distinct {hyper.NAME!r} values')
    first[name] = i
    names.append(name)
  return names


def short(value):
  """A value as names and tables show it: `{run:a}/checkpoints/5` -> a@5, a path -> its
  file name."""
  if isinstance(value, (tuple, list)):
    return 'x'.join(short(v) for v in value)
  text = REF.sub(r'\1', str(value)).replace('/checkpoints/', '@').rstrip('/')
  return text.rsplit('/', 1)[-1]


def _refs(point):
  return [m for v in point.values() if isinstance(v, str) for m in REF.findall(v)]


def _check_parents(run, by_name):
  for parent in run.parents:
    if parent not in by_name:
      raise ConfigError(f'run {run.name!r} refers to {{run:{parent}}}, which is not a run of '
                        f'the sweep')
  for value in run.overrides.values():
    for parent, step in _STEP_REF.findall(value if isinstance(value, str) else ''):
      why = _not_kept(by_name[parent][1], int(step))
      if why:
        raise ConfigError(f'run {run.name!r} starts from step {step} of run {parent!r}, which '
                          f'{parent!r} will not keep ({why})')


def _not_kept(config, step):
  """Why a run's checkpoint at `step` will be gone when it finished (None: it stays).
  A preemption save may push any step out of the newest `ckpt.keep`, so only the
  last step and the `ckpt.keep_every` multiples are sure to stay."""
  total, every, tau = config.total_steps, config.checkpoint_every_steps, config.upcycle.step
  keep, keep_every = config.ckpt.keep, config.ckpt.keep_every
  if step < 1 or step > total:
    return f'it saves steps 1 to total_steps={total}'
  if not (step == total or step == tau or (every and step % every == 0)):
    return f'it saves every checkpoint_every_steps={every} steps'
  if not (step == total or keep == 0 or (keep_every and step % keep_every == 0)):
    return (f'it keeps its newest ckpt.keep={keep}; set its config.ckpt.keep_every to a '
            f'divisor of {step}')
  return None


def _topological(runs):
  """The sweep's order, except that a run comes after its parents. A cycle is an error."""
  order, done, pending = [], set(), list(runs)
  while pending:
    run = next((r for r in pending if all(p in done for p in r.parents)), None)
    if run is None:
      raise ConfigError(f'runs depend on each other in a cycle: {_cycle(pending)}')
    order.append(run)
    done.add(run.name)
    pending.remove(run)
  return order


def _cycle(pending):
  """Every pending run waits for a pending parent: follow them until one repeats."""
  by_name = {r.name: r for r in pending}
  path, run = [], pending[0]
  while run.name not in path:
    path.append(run.name)
    run = by_name[next(p for p in run.parents if p in by_name)]
  return ' -> '.join(path[path.index(run.name):] + [run.name])
