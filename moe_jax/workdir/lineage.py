"""lineage.json: where a workdir's model came from, stage by stage, back to
the root.

Every path that grows a workdir from another records it: the upcycle CLI
(into its --dst), the trainer (at its first start from `init_from` or from
scratch, and at an in-run transition), and Hugging Face import
(`record_import`). A record is a list of stages, root first; the last is the
model the workdir trains now:

  {"format": 1, "stages": [STAGE, ...]}
  STAGE = {"workdir": where it trained, "start_step": its first step there,
           "end_step": the step it was grown from (null: still training),
           "tokens_per_step": B*L there, "tokens_before": tokens the chain had
           seen when it started (null: unknown), "model": run_record.summary,
           "origin": ORIGIN (null: unknown, a workdir older than lineage)}
  ORIGIN = {"how": scratch | init_from | upcycle | in_run | hf_import,
            "parent": {"checkpoint", "step"} (init_from, upcycle),
                      and for a merge of several sources also "parents" (all of
                      them, the first is "parent", whose chain the stages
                      continue) and "parent_lineages" (the others' records),
                      {"workdir", "step"} (in_run), {"hf", "sha256"} (import),
            "seed", "code": {"version", "git", "dirty"}, "time",
            and for a growth "recipe", "factor", "args" (resolved), "target",
            "report" (loss_before, loss_after, max_abs_dlogits, tokens)}

Ancestors are copied into the child when it is grown, so the chain prints
from the child alone: a parent deleted or moved later is reported by `check`,
never fatal. The trainer also stores the record in every checkpoint's meta
(`meta['lineage']`), so a step directory carries its own history.

This module reads and writes JSON only (no JAX), so `python -m
moe_jax.lineage` and tools are fast; model summaries come from the caller
(`run_record.summary(config)`). Printing a record as a table is
lineage_table.py's.
"""
import datetime
import functools
import importlib.metadata
import json
import os
import subprocess

from moe_jax.errors import ConfigError
from moe_jax.workdir import files

FILE = 'lineage.json'
FORMAT = 1


@functools.lru_cache(maxsize=None)
def code_version():
  """The code writing a record: the git commit of the checkout moe_jax runs
  from (and whether tracked files differ from it), else None; and the
  installed package version, else None."""
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = dict(version=None, git=None, dirty=None)
  try:
    out['version'] = importlib.metadata.version('moe_jax')
  except importlib.metadata.PackageNotFoundError:
    pass
  git = lambda *args: subprocess.run(['git', '-C', package, *args], capture_output=True,
                                     text=True, timeout=20, check=True).stdout.strip()
  try:
    top, commit = git('rev-parse', '--show-toplevel', 'HEAD').splitlines()
    # An installed copy inside some other repository is not that repository's code.
    if os.path.realpath(top) == os.path.realpath(os.path.dirname(package)):
      out.update(git=commit, dirty=bool(git('status', '--porcelain', '--untracked-files=no')))
  except (OSError, ValueError, subprocess.SubprocessError):
    pass
  return out


def origin(how, parent=None, seed=None, **details):
  """How a stage's model came to be (see the module docstring)."""
  return dict(how=how, parent=parent, seed=seed, **details, code=code_version(),
              time=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'))


def stage(workdir, start_step, tokens_per_step, model, origin_):
  return dict(workdir=os.path.abspath(workdir), start_step=int(start_step), end_step=None,
              tokens_per_step=tokens_per_step, tokens_before=0, model=model, origin=origin_)


def begin(first):
  """A record whose root is `first` (trained from scratch, or imported)."""
  return dict(format=FORMAT, stages=[first])


def _own(stages):
  """Index of the first of the trailing stages trained in the last stage's
  workdir: the record's own stages, whatever path the workdir has now."""
  i = len(stages) - 1
  while i > 0 and stages[i - 1]['workdir'] == stages[-1]['workdir']:
    i -= 1
  return i


def cut(record, step):
  """`record` as it stood at `step` of its own workdir: own stages started
  after `step` are dropped (a transition a resumed run has not reached yet)."""
  stages = record['stages']
  own = _own(stages)
  keep = stages[:own + 1] + [s for s in stages[own + 1:] if s['start_step'] <= step]
  return dict(record, stages=keep[:-1] + [dict(keep[-1], end_step=None)])


def grow(record, step, new):
  """`record` continued by the stage `new`, grown from the model at `step` of
  the record's own workdir (the parent checkpoint's step; tau in-run)."""
  stages = [dict(s) for s in cut(record, step)['stages']]
  last = stages[-1]
  if step < last['start_step']:
    raise ConfigError(f'lineage: step {step} precedes the start ({last["start_step"]}) of '
                      f'the stage it grows from in {last["workdir"]}')
  last['end_step'] = int(step)
  known = None not in (last['tokens_before'], last['tokens_per_step'])
  tokens = (last['tokens_before'] + (step - last['start_step']) * last['tokens_per_step']
            if known else None)
  return dict(format=FORMAT, stages=stages + [dict(new, tokens_before=tokens)])


_STAGE_KEYS = ('workdir', 'start_step', 'end_step', 'tokens_per_step', 'tokens_before', 'model',
               'origin')


def _problem(record):
  """What makes `record` not a lineage record (None: nothing)."""
  stages = record.get('stages') if isinstance(record, dict) else None
  if not isinstance(stages, list) or not stages:
    return 'expected "stages", a non-empty list'
  for i, s in enumerate(stages):
    missing = [k for k in _STAGE_KEYS if not isinstance(s, dict) or k not in s]
    if missing:
      return f'stage {i} lacks {missing[0]!r}'
    if not _step(s['start_step']) or not isinstance(s['workdir'], str):
      return f'stage {i}: start_step must be an integer >= 0 and workdir a path'
    if s['end_step'] is not None and not (_step(s['end_step']) and
                                          s['end_step'] >= s['start_step']):
      return (f'stage {i}: end_step={s["end_step"]!r} must be null or an integer >= its '
              f'start_step={s["start_step"]}')
  return _out_of_order(stages)


def _step(value):
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _out_of_order(stages):
  """What makes the stages no chain: one that repeats an earlier stage (a
  cycle), tokens that go back, or a stage of the same workdir that starts
  before the one it continues ends (steps that go back); None: nothing."""
  for i in range(1, len(stages)):
    prev, s = stages[i - 1], stages[i]
    same = lambda a, b: {k: v for k, v in a.items() if k != 'end_step'} == {
        k: v for k, v in b.items() if k != 'end_step'}
    if any(same(s, earlier) for earlier in stages[:i]):
      return f'stage {i} repeats an earlier stage (the stages form a cycle)'
    if prev['end_step'] is None:
      return f'stage {i - 1} has no end_step, yet stage {i} grew from it'
    if s['workdir'] == prev['workdir'] and s['start_step'] < prev['end_step']:
      return (f'stage {i} starts at step {s["start_step"]}, before stage {i - 1} of the same '
              f'workdir ends (step {prev["end_step"]}): the steps go back')
    before = [t['tokens_before'] for t in (prev, s)]
    if None not in before and all(isinstance(t, (int, float)) for t in before) and (
        before[1] < before[0]):
      return (f'stage {i} starts with tokens_before={before[1]}, fewer than stage {i - 1} '
              f'({before[0]}): the tokens go back')
  return None


def read(workdir):
  """The workdir's lineage.json, or None; an unreadable or malformed one is a
  ConfigError naming it."""
  path = os.path.join(workdir, FILE)
  if not os.path.exists(path):
    return None
  record = files.read_json(path)
  problem = _problem(record)
  if problem:
    raise ConfigError(f'{path}: {problem}')
  return record


def write(workdir, record):
  files.write_json(os.path.join(workdir, FILE), record)


def for_run(workdir, run, how, seed):
  """The lineage a training run in `workdir` continues (`run`: its run.json
  record): the one recorded there (by the upcycle CLI, an import or an earlier
  start), else a new one from run['source'] (`how` names the way: init_from,
  or upcycle for a --dst written before lineage existed), else from scratch;
  a workdir that holds checkpoints but neither file (written by other code)
  starts with a stage of unknown origin."""
  record = read(workdir)
  if record is None:
    source = run.get('source')
    first = stage(workdir, 0, run['tokens_per_step'], run['model'], origin(
        how if source else 'scratch', seed=seed,
        parent=dict(checkpoint=source['checkpoint'], step=source['step']) if source else None))
    if source:
      return grow(*_parent(source['checkpoint'], source['step']), first)
    if _newest(workdir) is not None and not os.path.exists(os.path.join(workdir, files.RUN)):
      return begin(dict(first, origin=None, tokens_before=None,
                        note=f'no {FILE} before this start: origin unknown'))
    return begin(first)
  last = record['stages'][-1]
  if last['tokens_per_step'] is None:   # an import: known once it trains
    record = dict(record, stages=record['stages'][:-1] + [
        dict(last, tokens_per_step=run['tokens_per_step'])])
  return record


def _parent(ckpt, step):
  """(record, step) at a parent checkpoint; one gone since is a stage of
  unknown origin that says so."""
  try:
    return at_checkpoint(ckpt)
  except ConfigError as e:
    return _unrecorded(os.path.dirname(os.path.dirname(ckpt)), step, f'parent missing: {e}'), step


def record_import(workdir, model, source, sha256=None, tokens=None, seed=None, **details):
  """The lineage of a workdir imported from outside moe_jax (Hugging Face
  interop): one root stage at `workdir` (its final path) whose model came
  from `source` (a hub name, directory or file) with content hash `sha256`
  (digest.file_digest). `model` is `run_record.summary(config)`; `tokens` the
  tokens the source was trained on, when known (the planner and collect need
  them); `details` go into the origin (arch, revision, ...). The importer
  writes it (`write`) and puts it in the step-0 meta (`meta['lineage']`)."""
  first = stage(workdir, 0, None, model, origin('hf_import', parent=dict(
      hf=source, sha256=sha256), seed=seed, **details))
  return begin(dict(first, tokens_before=tokens))


def locate(ckpt):
  """CKPT (a workdir or a checkpoint step directory) -> (workdir, step); the
  step of a workdir is its newest checkpoint (None: it has none)."""
  path = os.path.abspath(os.path.expanduser(ckpt))
  if not os.path.isdir(path):
    raise ConfigError(f'{path} does not exist')
  parent = os.path.dirname(path)
  if os.path.basename(path).isdigit() and os.path.basename(parent) == files.CHECKPOINTS:
    return os.path.dirname(parent), int(os.path.basename(path))
  if not any(os.path.exists(os.path.join(path, f)) for f in (FILE, files.RUN, files.CHECKPOINTS)):
    raise ConfigError(f'{path} is not a workdir (no {FILE}, {files.RUN} or {files.CHECKPOINTS}/)')
  return path, _newest(path)


def _newest(workdir):
  """The newest checkpoint step in `workdir`, or None."""
  directory = os.path.join(workdir, files.CHECKPOINTS)
  steps = [int(d) for d in os.listdir(directory) if d.isdigit()] if os.path.isdir(
      directory) else []
  return max(steps) if steps else None


def _meta_record(workdir, step):
  # Orbax keeps a JSON item as ITEM/metadata in the step directory.
  path = os.path.join(workdir, files.CHECKPOINTS, str(step), 'meta', 'metadata')
  try:
    with open(path) as f:
      record = json.load(f).get('lineage')
  except (OSError, ValueError, AttributeError):
    return None
  return None if _problem(record) else record


def _unrecorded(workdir, step, note):
  """One stage for a workdir without a readable lineage: its model from
  run.json; tokens before it known (0) only if run.json says it started from
  scratch and never grew."""
  run = {}
  try:
    run = files.read_json(os.path.join(workdir, files.RUN))
  except ConfigError:
    pass
  tau = run.get('upcycle_step') or 0
  model = run.get('grown') if tau and step is not None and step >= tau else run.get('model')
  scratch = run and not run.get('source') and not tau
  return begin(dict(stage(workdir, 0, run.get('tokens_per_step'), model, None),
                    tokens_before=0 if scratch else None, note=note))


def at_checkpoint(ckpt):
  """(record, step): the lineage of the model at CKPT, cut at its step. Read
  from the step's meta, else the workdir's lineage.json, else rebuilt from
  run.json as one stage of unknown origin; a missing or unreadable record is
  noted in the stage, not an error."""
  workdir, step = locate(ckpt)
  record = _meta_record(workdir, step) if step is not None else None
  if record is None:
    try:
      record = read(workdir)
    except ConfigError as e:
      return _unrecorded(workdir, step, f'lineage unreadable: {e}'), step
  if record is None:
    return _unrecorded(workdir, step, f'no {FILE} (written before lineage existed)'), step
  return (cut(record, step) if step is not None else record), step


def check(record, workdir=None):
  """Problems with the parents a record names, one line each: a checkpoint
  or workdir deleted or moved since (the chain still prints from the copy in
  the record), and `workdir` no longer where the record says."""
  problems = []
  stages = record['stages']
  for i, s in enumerate(stages):
    origin = s.get('origin') or {}
    # A merge (upcycle recipe merge) names all its parents; the first is `parent`.
    for parent in [origin.get('parent') or {}] + list(origin.get('parents') or [])[1:]:
      if 'checkpoint' in parent and not os.path.isdir(parent['checkpoint']):
        gone = os.path.isdir(os.path.dirname(os.path.dirname(parent['checkpoint'])))
        problems.append(f'stage {i}: parent checkpoint {parent["checkpoint"]} is missing ' + (
            '(its workdir is there: the step was rotated away or deleted)' if gone else
            '(moved or deleted)'))
    if s.get('note'):
      problems.append(f'stage {i}: {s["note"]}')
  recorded = stages[-1]['workdir']
  if workdir and os.path.abspath(workdir) != recorded:
    problems.append(f'the workdir was recorded at {recorded} and is now at '
                    f'{os.path.abspath(workdir)}')
  return problems
