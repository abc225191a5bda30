r"""The GPU session's prepared calls: each one device command, each under 5 minutes.

  python -m experiments.gpu.run --call=A --out=DIR              # on a lent GPU: A, B, C, then D
  python -m experiments.gpu.run --call=A --out=DIR --dry_run    # the same commands, tiny, on CPU

One call per device command, so each call's result is committed before the
next one runs, and a call cut short costs only itself. A call runs its
commands one after the other, each a subprocess under its own time limit,
and writes DIR/call_X.json after every step (provenance: commit, dirty flag,
versions, device, date, command), so a call cut short keeps what finished.

  A  speed: experiments.bench.mesh_step in one process, `10layer` at 16
     sequences with pallas_mosaic_gpu and the fused loss: attention
     reference (the repeat of the 97 ms row) and cudnn, then both at 32
     sequences. MFU by the repository's count and with the output
     projection (`mfu`, `mfu_with_logits`), the device's peak bytes in use.
  B  the workflow, small: experiments/gpu/config.py:small (4 layers, 40
     steps, 4 -> 8 experts at tau = 20) trained uninterrupted; again with
     SIGTERM at step 30 (experiments/gpu/term_at.py) and resumed by the same
     command, every step's loss compared; `evaluate`; `export_hf`; the
     export's logits in transformers against moe_jax's (hf_logits.py).
  C  the GPU test subset under pytest (kernels, attention, loss), then
     `plan --memory` of call B's model and of `10layer` at 16 x 1024.
  D  the MoE dispatch paths in one process (ragged, pallas_mosaic_gpu,
     pallas) at `10layer` and seed 002's 8x15m: what `moe.dispatch='auto'`
     should pick on a GPU (models/dispatch.py, docs/benchmarks/gpu.md).

This process never imports JAX: a backend started here would take its share
of the GPU from every command (JAX preallocates 75 % of it by default), and
its threads would make every later fork unsafe. Provenance comes from a
subprocess; each command's XLA_PYTHON_CLIENT_PREALLOCATE and _MEM_FRACTION
are set for it (`_MEMORY`). Every line a command prints goes to
DIR/logs/NAME.txt stamped with the seconds since the command started and the
UTC time (commands.py), so a silent minute shows as a gap between two stamps. A
command past its time gets SIGABRT first, so Python's faulthandler prints
where each thread was (`abort_trace`), then SIGKILL.

--dry_run runs every command at tiny shapes on the CPU (`--collect-only` for
the tests; cudnn attention as its XLA twin; grouped for the Pallas dispatch
paths), under XLA:CPU's quick compile flags (DRY_XLA_FLAGS): what
tests/experiments/test_gpu_run.py runs.
"""
import argparse
import json
import os
import signal
import sys
import tempfile
import time

from experiments.gpu import commands
from moe_jax import containment
from moe_jax.errors import ConfigError
from moe_jax.xla_flags import LEGACY_EMITTERS

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CONFIG = 'experiments/gpu/config.py'

# The GPU tests: compiled kernels, attention, loss. The f32 device-tile case
# hangs in XLA's compiler (docs/benchmarks/gpu.md, "Where the GPU step's time goes").
TESTS = ['tests/kernels/test_device.py', 'tests/kernels/test_gmm_mgpu.py',
         'tests/kernels/test_gate_mgpu.py', 'tests/kernels/test_mgpu_padding.py',
         'tests/models/test_attention_cudnn.py', 'tests/models/test_attention_pallas.py',
         'tests/models/test_losses.py']
TESTS_DESELECT = 'not (float32 and device_tiles)'

# Seconds each command may take on the device. Every call must end inside 5
# minutes of device time with its provenance probe (`provenance`, a process
# that starts CUDA: ~15 s, estimated). The numbers they come from are the first H200
# call's (docs/benchmarks/gpu.md, 2026-11-28, and docs/benchmarks/
# h200_2026-11-28/): a `10layer` row at 16 sequences took 44.8 s for its
# compile and 3 warm-up steps, then 20 steps of 97 ms; the workflow at 12
# layers took 39 s to step 1 and 0.185 s a step after, and printed nothing
# for 117 s at its transition; the tests ran 32 of their 89 in 110 s.
BUDGET = dict(
    # Four rows of one process: ~45 s of compile and warm-up each, 2 s (16
    # sequences) or 4 s (32) of timed steps, ~15 s of start: ~210 s.
    A=dict(speed=250),
    # 4 of the 12 layers, scanned (the first call's 12 were not): about a
    # third of each number above (compile ~13 s, 0.06 s a step, 3 s for 40
    # steps; the transition ~40 s), ~10 s of start per process: ~70 s for
    # the first run, less for the second and the resumed one (they compile
    # nothing the first did not: the shared compilation cache), 15-30 s for
    # each of the last three. About 170 s in all, 260 s at most.
    B=dict(uninterrupted=100, interrupted=50, resumed=30, evaluate=25, export_hf=20,
           hf_logits=35),
    # 32 tests in 110 s, so perhaps not all 89 in 190 s: `-v` names each in
    # the log as it ends, so a cut run still says which passed. The plans
    # compile one step each (call B's model, `10layer`'s at 16 x 1024 ~40 s).
    C=dict(tests=190, plan_small=25, plan_10layer=45),
    # Six rows: the three `10layer` rows as A's (~47 s each), the 8x15m rows
    # 12-16 s each (H200, 2026-11-27), ~15 s of start: ~200 s.
    D=dict(dispatch=250),
)
# In the dry run the limits only stop a hung command (a shared CPU may be slow).
DRY_BUDGET_S = 300
PROBE_S = 45   # the probe's limit
# The dry run's programs are tiny, so compiling them is most of its time;
# these (tests/conftest.py's) cut its CPU time and change no result. The
# legacy fusion emitters join them where this jaxlib has them (`_probe`).
DRY_XLA_FLAGS = '--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true'
# Each command's share of the GPU, set for it whatever the caller's
# environment says. One command runs at a time, so a timed one may take most
# of the device (preallocated: no allocator growth inside a timed step); the
# others allocate as they go.
_MEMORY = dict(
    timed=dict(XLA_PYTHON_CLIENT_PREALLOCATE='true', XLA_PYTHON_CLIENT_MEM_FRACTION='0.9'),
    growing=dict(XLA_PYTHON_CLIENT_PREALLOCATE='false', XLA_PYTHON_CLIENT_MEM_FRACTION='0.9'))

def _stop(signum, frame):
  """SIGTERM, SIGHUP or Ctrl-C: the running commands' groups get SIGKILL, one
  line says so, then exit (call_X.json holds the steps done)."""
  del frame
  commands.kill_all()
  print(f'error: stopped by {signal.Signals(signum).name}', file=sys.stderr, flush=True)
  sys.exit(128 + signum)


class _Parser(argparse.ArgumentParser):
  """argparse with every command's one error line: `error: ...`, exit 2."""

  def error(self, message):
    print(f'error: {message}', file=sys.stderr)
    sys.exit(2)


def _out_error(out):
  """Why `out` cannot be this run's folder (None: it is one, made if new)."""
  if os.path.exists(out) and not os.path.isdir(out):
    return f'--out={out} is not a directory'
  if os.path.isdir(out) and os.listdir(out):
    return f'--out={out} exists and is not empty'
  try:
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryFile(dir=out):
      pass
  except OSError as e:
    return f'--out={out}: cannot write there ({e.strerror})'
  return None


def _env(memory='growing', **extra):
  """The commands' environment: this repository first on the caller's
  PYTHONPATH (which may hold packages carried to the device), output
  unbuffered (each line stamped when printed), the GPU memory setting
  `memory` (`_MEMORY`), and no XLA_FLAGS but what a step sets (`extra`,
  recorded with its command), so a caller's flags (a test's 8 fake CPU
  devices) change nothing."""
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  path = os.pathsep.join(p for p in (_REPO, os.environ.get('PYTHONPATH')) if p)
  return dict(env, PYTHONPATH=path, PYTHONFAULTHANDLER='1', PYTHONUNBUFFERED='1',
              **_MEMORY[memory], **extra)


def _json_line(result):
  """The last JSON object line a command printed, or None."""
  for line in reversed(result['stdout'].splitlines()):
    if line.startswith('{'):
      try:
        return json.loads(line)
      except json.JSONDecodeError:
        pass
  return None


def _brief(command, **more):
  """A command's record without its whole output."""
  return dict({k: v for k, v in command.items() if k != 'stdout'}, **more)


def _py(module, *args):
  return [sys.executable, '-m', module, *args]


def write_json(path, obj):
  """`obj` to `path` atomically (a temp file, then a rename), with plain json:
  nothing here may start a JAX backend."""
  with open(path + '.tmp', 'w') as f:
    json.dump(obj, f, indent=1)
  os.replace(path + '.tmp', path)


class Context:
  """What a call's steps share: the output folder, sizes and time limits."""

  def __init__(self, call, out, dry_run, dry_flags=''):
    self.out, self.dry_run, self.dry_flags = out, dry_run, dry_flags
    self.budget = ({k: DRY_BUDGET_S for k in BUDGET[call]} if dry_run else BUDGET[call])
    self.tiny = ',tiny' if dry_run else ''

  def config(self, name):
    return f'--config={_CONFIG}:{name}{self.tiny}'

  def env(self, xla_flags='', memory='growing', **extra):
    """A command's environment (`_env`); the dry run's XLA_FLAGS start with
    DRY_XLA_FLAGS."""
    flags = ' '.join(f for f in (self.dry_flags, xla_flags) if f)
    return _env(memory, **extra, **({'XLA_FLAGS': flags} if flags else {}))

  def run(self, name, cmd, env=None):
    """`_run` under the step's time limit, its log DIR/logs/NAME.txt."""
    log = os.path.join(self.out, 'logs', f'{name}.txt')
    return commands.run(cmd, self.budget[name], env or self.env(), log)


def _status(ok):
  return 'ok' if ok else 'failed'


def _mesh_step(ctx, name, *flags):
  """One experiments.bench.mesh_step process; its rows (written by it after
  each row, so a cut process keeps the rows it finished)."""
  path = os.path.join(ctx.out, f'{name}.json')
  args = ['--small', '--dtype=bfloat16'] if ctx.dry_run else []
  result = ctx.run(name, _py('experiments.bench.mesh_step', f'--out={path}', '--meshes=data=1',
                             *args, *flags), ctx.env(memory='timed'))
  rows = []
  if os.path.exists(path):
    with open(path) as f:
      rows = json.load(f)['results']
  ok = result['rc'] == 0 and rows and not any('error' in r for r in rows)
  return dict(status=_status(ok), run=_brief(result), rows=rows)


def call_a(ctx):
  """Call A: the `10layer` speed rows, one process."""
  preset = [] if ctx.dry_run else ['--preset=10layer', '--dispatch=pallas_mosaic_gpu']
  batch = '2,4' if ctx.dry_run else '16,32'
  yield 'speed', lambda: _mesh_step(ctx, 'speed', *preset, f'--batch_per_device={batch}',
                                    '--attention=reference,cudnn', '--cross_entropy=fused')


def call_d(ctx):
  """Call D: the dispatch paths against each other, one process (in the dry
  run the CPU's grouped loop stands in for the Pallas paths, which run only
  in interpret mode there)."""
  presets = 'tiny' if ctx.dry_run else '10layer,8x15m'
  paths = 'ragged,grouped' if ctx.dry_run else 'ragged,pallas_mosaic_gpu,pallas'
  batch = [] if ctx.dry_run else ['--batch_per_device=16']
  yield 'dispatch', lambda: _mesh_step(ctx, 'dispatch', f'--preset={presets}',
                                       f'--dispatch={paths}', *batch, '--attention=reference',
                                       '--cross_entropy=fused')


def _losses(workdir):
  """{step: loss} of a workdir's metrics.jsonl (a resumed run's last line per step)."""
  out = {}
  path = os.path.join(workdir, 'metrics.jsonl')
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        row = json.loads(line)
        if 'loss' in row:
          out[row['step']] = row['loss']
  return out


def call_b(ctx):
  """Call B: train with an in-run 2x transition, SIGTERM and resume, evaluate,
  export, the export's logits in transformers."""
  root = os.path.join(ctx.out, 'workflow')
  whole, cut, hf = (os.path.join(root, n) for n in ('uninterrupted', 'interrupted', 'hf'))
  config = ctx.config('small')
  steps = 8 if ctx.dry_run else 40
  term_at = steps * 3 // 4   # after the transition at half
  # XLA's deterministic reductions on the GPU, so equal means equal; each
  # compile and its seconds in the log (the first H200 call lost two minutes
  # at tau without saying where).
  device = {} if ctx.dry_run else dict(JAX_LOG_COMPILES='1')
  train_env = ctx.env('' if ctx.dry_run else '--xla_gpu_deterministic_ops=true', **device)

  def command(name, cmd, env=None):
    result = ctx.run(name, cmd, env)
    return dict(_brief(result, result=_json_line(result)), status=_status(result['rc'] == 0))

  yield 'uninterrupted', lambda: command('uninterrupted', _py(
      'moe_jax.main', config, f'--workdir={whole}'), train_env)
  yield 'interrupted', lambda: command('interrupted', _py(
      'experiments.gpu.term_at', f'--term_at_batch={term_at}', config, f'--workdir={cut}'),
                                       train_env)
  yield 'resumed', lambda: command('resumed', _py('moe_jax.main', config, f'--workdir={cut}'),
                                   train_env)

  def losses():
    want, got = _losses(whole), _losses(cut)
    diffs = [abs(got[s] - want[s]) for s in want if s in got]
    equal = bool(diffs) and len(diffs) == len(want) == steps and max(diffs) == 0
    return dict(status=_status(equal), steps=len(want), compared=len(diffs),
                max_abs_diff=max(diffs) if diffs else None,
                final=want.get(max(want)) if want else None, equal=equal)

  yield 'losses', losses
  yield 'evaluate', lambda: command('evaluate', _py('moe_jax.evaluate', f'--ckpt={whole}',
                                                    '--batches=4'))
  yield 'export_hf', lambda: command('export_hf', _py('moe_jax.interop.export_hf',
                                                      f'--ckpt={whole}', f'--out={hf}'))

  def hf_logits():
    out = command('hf_logits', _py('experiments.gpu.hf_logits', f'--ckpt={whole}', f'--hf={hf}'))
    # On the device transformers is there, so 'skipped' is a failure there.
    wanted = ('ok', 'skipped') if ctx.dry_run else ('ok',)
    if (out['result'] or {}).get('status') not in wanted:
      out['status'] = 'failed'
    return out

  yield 'hf_logits', hf_logits


def call_c(ctx):
  """Call C: the GPU tests, then the memory plans."""
  # tests/conftest.py defaults JAX_PLATFORMS to cpu, which would skip every
  # device test: on the device the tests name the GPU.
  platforms = {} if ctx.dry_run else dict(JAX_PLATFORMS='cuda,cpu')
  env = ctx.env(**platforms)
  junit = os.path.join(ctx.out, 'tests.xml')
  args = ['--collect-only', '-q'] if ctx.dry_run else ['-v', f'--junitxml={junit}']

  def tests():
    result = ctx.run('tests', _py('pytest', '-rfE', '-p', 'no:xdist', '-p', 'no:cacheprovider',
                                  '-k', TESTS_DESELECT, *args, *TESTS), env)
    lines = result['stdout'].splitlines()
    return dict(status=_status(result['rc'] == 0), summary=(lines or [''])[-1],
                passed=sum(' PASSED' in l for l in lines),
                failed=sum(' FAILED' in l or ' ERROR' in l for l in lines), tests=_brief(result))

  def plan(name):
    result = ctx.run(f'plan_{name}', _py('moe_jax.plan', '--memory', ctx.config(name)), env)
    found = _json_line(result)
    return dict(_brief(result, plan=found), status=_status(result['rc'] == 0 and found))

  yield 'tests', tests
  yield 'plan_small', lambda: plan('small')
  yield 'plan_10layer', lambda: plan('10layer')


CALLS = dict(A=call_a, B=call_b, C=call_c, D=call_d)


def provenance(argv, log, xla_flags=''):
  """experiments/provenance.py's record, read by a subprocess so this process
  never starts a JAX backend (the commands need the GPU to themselves); None
  where the probe failed (XLA aborts a process whose XLA_FLAGS names a flag
  this jaxlib does not know)."""
  env = _env(**({'XLA_FLAGS': xla_flags} if xla_flags else {}))
  probe = commands.run([sys.executable, '-c', (
      'import json, sys, jax; from experiments import provenance; '
      'd = jax.devices()[0]; print(json.dumps(dict(provenance.record(sys.argv[1:]), '
      'platform=d.platform, device_count=jax.device_count())))'),
                os.path.abspath(__file__), *argv], PROBE_S, env, log)
  return _json_line(probe)


def _probe(argv, out, dry_run):
  """(provenance, the dry run's XLA_FLAGS): the legacy fusion emitters join
  DRY_XLA_FLAGS where the probe, started with them, runs (one process for
  both questions)."""
  log = os.path.join(out, 'logs', 'provenance.txt')
  if not dry_run:
    return provenance(argv, log) or dict(probe_error=commands.tail(log)), ''
  for flags in (f'{DRY_XLA_FLAGS} {LEGACY_EMITTERS}', DRY_XLA_FLAGS):
    found = provenance(argv, log, flags)
    if found:
      return found, flags
  return dict(probe_error=commands.tail(log)), DRY_XLA_FLAGS


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  ap = _Parser(description=__doc__.splitlines()[0])
  ap.add_argument('--call', required=True, help=f'one of {sorted(CALLS)}: A, B, C, then D')
  ap.add_argument('--out', required=True, help='folder for call_X.json and the runs')
  ap.add_argument('--dry_run', action='store_true', help='tiny shapes on the CPU')
  args = ap.parse_args(argv)
  if args.call not in CALLS:
    print(f'error: --call={args.call}: not one of {sorted(CALLS)}', file=sys.stderr)
    return 2
  try:
    containment.not_run_file(args.out, '--out')   # never inside a workdir
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  error = _out_error(args.out)
  if error:
    print(f'error: {error}', file=sys.stderr)
    return 2
  for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(signum, _stop)
  if args.call == 'B':
    # B's commands share one compilation cache: the second run and the
    # resumed one compile nothing the first did not. (The other calls compile
    # each program once; writing it to disk would only cost them time.)
    os.environ.update(JAX_COMPILATION_CACHE_DIR=os.path.join(args.out, 'jax_cache'),
                      JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
                      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
  found, dry_flags = _probe(argv, args.out, args.dry_run)
  ctx = Context(args.call, args.out, args.dry_run, dry_flags)
  record = dict(call=args.call, dry_run=args.dry_run, provenance=found, budget_s=ctx.budget,
                steps={})
  path = os.path.join(args.out, f'call_{args.call}.json')
  print(f'call {args.call}, device: {record["provenance"].get("device")}', flush=True)
  write_json(path, record)
  for name, fn in CALLS[args.call](ctx):
    t0 = time.monotonic()
    print(f'[{name}] ...', flush=True)
    try:
      result = fn()
    except Exception as err:  # pylint: disable=broad-except
      # One step failing must not lose the others.
      result = dict(status='error', error=f'{type(err).__name__}: {err}'[:500])
    result['seconds'] = round(time.monotonic() - t0, 1)
    record['steps'][name] = result
    write_json(path, record)
    print(f'[{name}] {result["status"]} in {result["seconds"]} s', flush=True)
  record['status'] = _status(all(s['status'] == 'ok' for s in record['steps'].values()))
  write_json(path, record)
  print(f'wrote {path}: {record["status"]}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
