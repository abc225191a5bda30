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
(`run_record.summary(config)`).
"""
import datetime
import functools
import hashlib
import importlib.metadata
import json
import os
import subprocess

from moe_jax.errors import ConfigError
from moe_jax.workdir import files

FILE = 'lineage.json'
FORMAT = 1
CHECKPOINTS = 'checkpoints'


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
    if not isinstance(s['start_step'], int) or not isinstance(s['workdir'], str):
      return f'stage {i}: start_step must be an integer and workdir a path'
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
  (`file_digest`). `model` is `run_record.summary(config)`; `tokens` the
  tokens the source was trained on, when known (the planner and collect need
  them); `details` go into the origin (arch, revision, ...). The importer
  writes it (`write`) and puts it in the step-0 meta (`meta['lineage']`)."""
  first = stage(workdir, 0, None, model, origin('hf_import', parent=dict(
      hf=source, sha256=sha256), seed=seed, **details))
  return begin(dict(first, tokens_before=tokens))


def file_digest(path, chunk=1 << 20):
  """SHA-256 of a file, or of a directory's files (names and contents, in
  sorted order): the hash `record_import` records."""
  h = hashlib.sha256()
  paths = [path] if os.path.isfile(path) else sorted(
      os.path.join(d, n) for d, _, names in os.walk(path) for n in names)
  for p in paths:
    h.update(os.path.relpath(p, path).encode() if p != path else b'')
    with open(p, 'rb') as f:
      for block in iter(lambda: f.read(chunk), b''):
        h.update(block)
  return h.hexdigest()


def locate(ckpt):
  """CKPT (a workdir or a checkpoint step directory) -> (workdir, step); the
  step of a workdir is its newest checkpoint (None: it has none)."""
  path = os.path.abspath(os.path.expanduser(ckpt))
  if not os.path.isdir(path):
    raise ConfigError(f'{path} does not exist')
  parent = os.path.dirname(path)
  if os.path.basename(path).isdigit() and os.path.basename(parent) == CHECKPOINTS:
    return os.path.dirname(parent), int(os.path.basename(path))
  if not any(os.path.exists(os.path.join(path, f)) for f in (FILE, files.RUN, CHECKPOINTS)):
    raise ConfigError(f'{path} is not a workdir (no {FILE}, {files.RUN} or {CHECKPOINTS}/)')
  return path, _newest(path)


def _newest(workdir):
  """The newest checkpoint step in `workdir`, or None."""
  directory = os.path.join(workdir, CHECKPOINTS)
  steps = [int(d) for d in os.listdir(directory) if d.isdigit()] if os.path.isdir(
      directory) else []
  return max(steps) if steps else None


def _meta_record(workdir, step):
  # Orbax keeps a JSON item as ITEM/metadata in the step directory.
  path = os.path.join(workdir, CHECKPOINTS, str(step), 'meta', 'metadata')
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
    parent = (s.get('origin') or {}).get('parent') or {}
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


def _val_loss(workdir, first, last):
  """The last val_loss logged in `workdir` at a step in [first, last], or None."""
  found = [r['val_loss'] for r in files.metrics(workdir)
           if 'val_loss' in r and first <= r.get('step', -1) <= last]
  return found[-1] if found else None


def describe(model):
  """'dense' or 'MoE 8x top-2'."""
  if not model:
    return 'unknown'
  return f'MoE {model["num_experts"]}x top-{model["top_k"]}' if model['num_experts'] else 'dense'


def _how(s):
  o = s.get('origin')
  if not o:
    return 'unknown'
  parent = o.get('parent') or {}
  recipe = o.get('recipe') or '?'
  if o.get('factor'):   # recorded by recipes that grow by upcycle.factor
    recipe += f' x{o.get("factor")}'
  return {
      'scratch': lambda: f'scratch, seed {o.get("seed")}',
      'init_from': lambda: f'init_from {parent.get("checkpoint")}',
      'upcycle': lambda: f'upcycle CLI {recipe} of {parent.get("checkpoint")}',
      'in_run': lambda: f'in-run {recipe} at step {parent.get("step")}',
      'hf_import': lambda: f'import {parent.get("hf")}',
  }.get(o['how'], lambda: o['how'])()


def rows(record, step=None):
  """One dict per stage, root first: steps, tokens trained there and in all
  (None: unknown), parameter counts, how it began (with the loss before and
  after a growth) and the last val_loss it logged. `step` ends the last stage
  (default: where the record says, else its start)."""
  out = []
  stages = record['stages']
  for i, s in enumerate(stages):
    end = s['end_step'] if s['end_step'] is not None else (
        step if step is not None and i == len(stages) - 1 else s['start_step'])
    known = None not in (s['tokens_before'], s['tokens_per_step'])
    tokens = (end - s['start_step']) * s['tokens_per_step'] if s['tokens_per_step'] else None
    report = (s.get('origin') or {}).get('report') or {}
    model = s.get('model') or {}
    # A val_loss logged at tau in-run is the grown model's: it belongs to the next stage.
    in_run = i + 1 < len(stages) and stages[i + 1]['workdir'] == s['workdir']
    out.append(dict(
        stage=i, workdir=s['workdir'], start_step=s['start_step'], end_step=end,
        tokens=tokens, tokens_total=s['tokens_before'] + tokens if known else None,
        model=describe(model), params=model.get('params'), active=model.get('params_active'),
        how=_how(s), loss_before=report.get('loss_before'), loss_after=report.get('loss_after'),
        max_abs_dlogits=report.get('max_abs_dlogits'),
        val_loss=_val_loss(s['workdir'], s['start_step'], end - in_run)))
  return out


def _num(x, digits=3):
  if x is None:
    return '?'
  for unit, scale in (('T', 1e12), ('B', 1e9), ('M', 1e6), ('K', 1e3)):
    if abs(x) >= scale:
      return f'{x / scale:.{digits}g}{unit}'
  return f'{x:.{digits}g}'


def chain(table):
  """'dense 35.2K -> MoE 4x top-2 85.3K at step 2 -> ...' from rows()."""
  parts = []
  for r in table:
    at = '' if not r['stage'] else f' at step {table[r["stage"] - 1]["end_step"]}'
    parts.append(f'{r["model"]} {_num(r["params"])}{at}')
  return ' -> '.join(parts)


COLUMNS = (('stage', 'stage'), ('model', 'model'), ('params', 'params'), ('active', 'active'),
           ('steps', 'steps'), ('tokens', 'tokens'), ('tokens_total', 'total tokens'),
           ('loss', 'loss at growth'), ('val_loss', 'val_loss at end'), ('how', 'how'),
           ('workdir', 'workdir'))


def cells(r):
  """The printed cells of one rows() entry, keyed like COLUMNS."""
  loss = ('' if r['loss_before'] is None else
          f'{r["loss_before"]:.4f} -> {r["loss_after"]:.4f}')
  return dict(stage=str(r['stage']), model=r['model'], params=_num(r['params']),
              active=_num(r['active']), steps=f'{r["start_step"]}-{r["end_step"]}',
              tokens=_num(r['tokens']), tokens_total=_num(r['tokens_total']), loss=loss,
              val_loss='' if r['val_loss'] is None else f'{r["val_loss"]:.4f}',
              how=r['how'], workdir=r['workdir'])


def markdown(record, step=None):
  """The chain as a Markdown section (for a model card)."""
  table = rows(record, step)
  lines = ['## Lineage', '', chain(table), '',
           '| ' + ' | '.join(title for _, title in COLUMNS) + ' |',
           '|' + '---|' * len(COLUMNS)]
  lines += ['| ' + ' | '.join(cells(r)[key] for key, _ in COLUMNS) + ' |' for r in table]
  return '\n'.join(lines) + '\n'
