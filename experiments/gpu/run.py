r"""The GPU session's one prepared call: workflow, tests, speed rows, memory.

  python -m experiments.gpu.run --out=DIR              # first thing on a lent GPU
  python -m experiments.gpu.run --out=DIR --dry_run    # the same steps, tiny, on CPU

Runs each step as subprocesses of the real commands, time-bounded, and
writes DIR/gpu_run.json after every step (provenance: commit, dirty flag,
versions, device, date, command), so a call cut short keeps what finished.
Every command's whole output lands in DIR/logs/. A failed or timed-out step
is recorded and the next one runs; a command past its time gets SIGABRT
first, so Python's faulthandler prints where each thread was (`abort_trace`).

  workflow  experiments/gpu/config.py:workflow (~85M parameters, 12 scanned
            layers, MoE 4 -> 8 experts at tau in the run): an uninterrupted run, then one that
            gets SIGTERM after tau (experiments/gpu/term_at.py) resumed by
            the same command; the losses of every step compared; `evaluate`;
            `export_hf`; the export's logits in transformers against
            moe_jax's (experiments/gpu/hf_logits.py)
  tests     the GPU test subset (kernels, attention, loss) under pytest, and
            `plan --memory` of the workflow's model and of `10layer` at
            16 x 1024 (memory: the compiled step's memory_analysis on this
            backend). They start with the workflow and run beside it:
            compiling is most of every command's time there, and it is
            CPU work on a host of many cores.
  speed     experiments.bench.mesh_step on one device, each step one call so
            its rows are each other's baselines: `10layer`, 16 sequences,
            pallas_mosaic_gpu, attention reference / cudnn x the fused loss
            whole / in chunks of 4096; seed 002's 8x0.5b at 8 sequences,
            attention reference / cudnn. MFU by the repository's count and
            with the output projection (mesh_step's `mfu`,
            `mfu_with_logits`), and the device's peak bytes in use.

--dry_run runs every step at tiny shapes on the CPU (`collect-only` for the
tests; cudnn attention as its XLA twin), its commands under XLA:CPU's quick
compile flags (DRY_XLA_FLAGS): what tests/experiments/test_gpu_run.py runs.
"""
import argparse
import ctypes
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from experiments.bench import cpu_step
from moe_jax.xla_flags import LEGACY_EMITTERS, accepted

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CONFIG = 'experiments/gpu/config.py'

# The GPU tests: compiled kernels, attention, loss. The f32 device-tile case
# hangs in XLA's compiler (docs/benchmarks.md, H200 run of the queue).
TESTS = ['tests/kernels/test_device.py', 'tests/kernels/test_gmm_mgpu.py',
         'tests/kernels/test_gate_mgpu.py', 'tests/kernels/test_mgpu_padding.py',
         'tests/models/test_attention_cudnn.py', 'tests/models/test_attention_pallas.py',
         'tests/models/test_losses.py']
TESTS_DESELECT = 'not (float32 and device_tiles)'

# Seconds per step on the device (9 minutes in all: tests run beside the
# workflow), and in the dry run, where they only stop a hung command (a shared
# CPU may be slow). From the first H200 call (docs/benchmarks/gpu.md, 2026-11-28):
# the unscanned workflow's first step took 36-39 s, a `10layer` row about 60
# s with its compile, and 110 s ran a third of the tests.
BUDGET = dict(workflow=260, tests=260, speed_10layer=220, speed_8x05b=50)
DRY_BUDGET = dict(workflow=300, tests=300, speed_10layer=300, speed_8x05b=300)
# After SIGABRT, how long faulthandler gets to print before SIGKILL.
_ABORT_GRACE_S = 20
# The dry run's programs are tiny, so compiling them is most of its time;
# these (tests/conftest.py's) cut its CPU time 69 -> 51 s and change no result.
# The legacy fusion emitters join them where this jaxlib has them (`Context`).
DRY_XLA_FLAGS = '--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true'


_LIVE = set()   # the process groups running now: `_stop` ends them


def _die_with_parent():
  """A command must not outlive this script: Linux sends it SIGKILL when the
  script dies, however (PR_SET_PDEATHSIG)."""
  if sys.platform.startswith('linux'):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # 1: PR_SET_PDEATHSIG


def _stop(signum, frame):
  """SIGTERM, SIGHUP or Ctrl-C: the running commands' groups get SIGKILL, one
  line says so, then exit (gpu_run.json holds the steps done)."""
  del frame
  for pid in list(_LIVE):
    os.killpg(pid, signal.SIGKILL)
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


def _run(cmd, timeout, env, log, background=False):
  """Runs cmd (a list) in its own process group, its output kept whole in the
  file `log`; {cmd, rc, seconds, timed_out, stdout, tail}. background=True
  returns the Popen to `_wait` on instead."""
  proc = subprocess.Popen(cmd, cwd=_REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True,
                          preexec_fn=_die_with_parent)
  _LIVE.add(proc.pid)
  proc.started, proc.timeout, proc.log = time.monotonic(), timeout, log
  proc.env_set = {k: v for k, v in env.items() if k != 'PYTHONPATH' and os.environ.get(k) != v}
  return proc if background else _wait(proc)


def _wait(proc):
  try:
    out, _ = proc.communicate(timeout=max(1, proc.timeout - (time.monotonic() - proc.started)))
    timed_out = False
  except subprocess.TimeoutExpired:
    # faulthandler (PYTHONFAULTHANDLER, `_env`) prints every thread's stack
    # on SIGABRT: a timed-out command says where it was stuck.
    os.killpg(proc.pid, signal.SIGABRT)
    try:
      out, _ = proc.communicate(timeout=_ABORT_GRACE_S)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      out, _ = proc.communicate()
    timed_out = True
  _LIVE.discard(proc.pid)
  os.makedirs(os.path.dirname(proc.log), exist_ok=True)
  with open(proc.log, 'w') as f:
    f.write(out)
  result = dict(cmd=shlex.join(['python', *proc.args[1:]]), env=proc.env_set,
                rc=proc.returncode, timed_out=timed_out,
                seconds=round(time.monotonic() - proc.started, 1), stdout=out,
                tail=out[-1500:])
  if timed_out and 'Fatal Python error' in out:
    result['abort_trace'] = out[out.rindex('Fatal Python error'):][:6000]
  return result


def _env(**extra):
  """The commands' environment: this repository first on the caller's
  PYTHONPATH (which may hold packages carried to the device), and no XLA_FLAGS
  but what a step sets (`extra`, recorded with its command), so a caller's
  flags (a test's 8 fake CPU devices) change nothing."""
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  path = os.pathsep.join(p for p in (_REPO, os.environ.get('PYTHONPATH')) if p)
  return dict(env, PYTHONPATH=path, PYTHONFAULTHANDLER='1', **extra)


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


class Context:
  """What the steps share: the output folder, sizes and each step's deadline."""

  def __init__(self, out, dry_run):
    self.out, self.dry_run = out, dry_run
    self.budget = DRY_BUDGET if dry_run else BUDGET
    self.tiny = ',tiny' if dry_run else ''
    self.dry_flags = ''
    if dry_run:
      self.dry_flags = DRY_XLA_FLAGS + (f' {LEGACY_EMITTERS}' if accepted(LEGACY_EMITTERS) else '')
    self.tests = None   # `start_tests`' processes while they run

  def config(self, name):
    return f'--config={_CONFIG}:{name}{self.tiny}'

  def env(self, xla_flags='', **extra):
    """A command's environment (`_env`); the dry run's XLA_FLAGS start with
    DRY_XLA_FLAGS."""
    flags = ' '.join(f for f in (self.dry_flags, xla_flags) if f)
    return _env(**extra, **({'XLA_FLAGS': flags} if flags else {}))

  def run(self, name, cmd, timeout, env=None, background=False):
    """`_run` with its output kept in DIR/logs/NAME.txt."""
    log = os.path.join(self.out, 'logs', f'{name}.txt')
    return _run(cmd, timeout, env or self.env(), log, background)


def start_tests(ctx):
  """Starts pytest on the GPU subset and the two memory plans, in the
  background (`step_tests` waits for them)."""
  budget = ctx.budget['tests']
  # They allocate as they go (no preallocation), beside the workflow's share.
  # tests/conftest.py defaults JAX_PLATFORMS to cpu, which would skip every
  # device test: on the device the tests name the GPU.
  platforms = {} if ctx.dry_run else dict(JAX_PLATFORMS='cuda,cpu')
  quiet = ctx.env(XLA_PYTHON_CLIENT_PREALLOCATE='false', **platforms)
  plans = {name: ctx.run(f'plan_{name}', _py('moe_jax.plan', '--memory', ctx.config(name)),
                         budget, quiet, background=True) for name in ('workflow', '10layer')}
  junit = os.path.join(ctx.out, 'tests.xml')
  args = ['--collect-only'] if ctx.dry_run else [f'--junitxml={junit}']
  tests = ctx.run('tests', _py('pytest', '-q', '-rfE', '-p', 'no:xdist', '-p', 'no:cacheprovider',
                               '-k', TESTS_DESELECT, *args, *TESTS), budget, quiet,
                  background=True)
  ctx.tests = dict(plans=plans, tests=tests)


def step_tests(ctx):
  """The tests and memory plans `start_tests` started, waited for."""
  tests = _wait(ctx.tests['tests'])
  summary = (tests['stdout'].strip().splitlines() or [''])[-1]
  memory = {}
  for name, proc in ctx.tests['plans'].items():
    result = _wait(proc)
    memory[name] = _brief(result, plan=_json_line(result))
  ok = tests['rc'] == 0
  return dict(status='ok' if ok else 'failed', summary=summary, tests=_brief(tests),
              memory_plan=memory)


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


def step_workflow(ctx):
  """Train with an in-run 2x transition, SIGTERM and resume, evaluate, export."""
  deadline = time.monotonic() + ctx.budget['workflow']
  left = lambda: max(1.0, deadline - time.monotonic())
  root = os.path.join(ctx.out, 'workflow')
  whole, cut, hf = (os.path.join(root, n) for n in ('uninterrupted', 'interrupted', 'hf'))
  config = ctx.config('workflow')
  # Three quarters of the way, after the transition at half.
  steps = 8 if ctx.dry_run else 200
  term_at = steps * 3 // 4
  # One after the other: the second run and the resumed one compile nothing
  # the first did not (JAX's compilation cache, `main`). XLA's deterministic
  # reductions on the GPU, so equal means equal. A share of the GPU's memory,
  # so the tests beside it have the rest. Each compile and its seconds in the
  # logs (the first H200 call lost two minutes at tau without saying where).
  device = {} if ctx.dry_run else dict(JAX_LOG_COMPILES='1')
  env = ctx.env('' if ctx.dry_run else '--xla_gpu_deterministic_ops=true',
                XLA_PYTHON_CLIENT_MEM_FRACTION='0.5', **device)
  out = dict(uninterrupted=_brief(ctx.run('uninterrupted', _py(
      'moe_jax.main', config, f'--workdir={whole}'), left(), env)))
  out['interrupted'] = _brief(ctx.run('interrupted', _py(
      'experiments.gpu.term_at', f'--term_at_batch={term_at}', config, f'--workdir={cut}'),
                                      left(), env))
  out['resumed'] = _brief(ctx.run('resumed', _py('moe_jax.main', config, f'--workdir={cut}'),
                                  left(), env))
  want, got = _losses(whole), _losses(cut)
  diffs = [abs(got[s] - want[s]) for s in want if s in got]
  out['losses'] = dict(steps=len(want), compared=len(diffs),
                       max_abs_diff=max(diffs) if diffs else None,
                       final=want.get(max(want)) if want else None,
                       equal=bool(diffs) and len(diffs) == len(want) == steps and max(diffs) == 0)
  quiet = ctx.env(XLA_PYTHON_CLIENT_PREALLOCATE='false')
  evaluate = ctx.run('evaluate', _py('moe_jax.evaluate', f'--ckpt={whole}', '--batches=4'),
                     left(), quiet)
  out['evaluate'] = _brief(evaluate, result=_json_line(evaluate))
  export = ctx.run('export_hf', _py('moe_jax.interop.export_hf', f'--ckpt={whole}',
                                    f'--out={hf}'), left(), quiet)
  out['export_hf'] = _brief(export, result=_json_line(export))
  logits = ctx.run('hf_logits', _py('experiments.gpu.hf_logits', f'--ckpt={whole}',
                                    f'--hf={hf}'), left(), quiet)
  out['hf_logits'] = _brief(logits, result=_json_line(logits))
  commands_ok = all(r['rc'] == 0 for r in (out['uninterrupted'], out['interrupted'],
                                           out['resumed'], evaluate, export, logits))
  hf_ok = (out['hf_logits']['result'] or {}).get('status') in ('ok', 'skipped')
  out['status'] = 'ok' if commands_ok and out['losses']['equal'] and hf_ok else 'failed'
  return out


def _mesh_step(ctx, name, *flags):
  path = os.path.join(ctx.out, f'{name}.json')
  args = ['--small', '--dtype=bfloat16'] if ctx.dry_run else []
  result = ctx.run(name, _py('experiments.bench.mesh_step', f'--out={path}', '--meshes=data=1',
                             *args, *flags), ctx.budget[name])
  rows = []
  if os.path.exists(path):
    with open(path) as f:
      rows = json.load(f)['results']
  ok = result['rc'] == 0 and rows and not any('error' in r for r in rows)
  return dict(status='ok' if ok else 'failed', run=_brief(result), rows=rows)


def step_speed_10layer(ctx):
  """Attention reference / cudnn x the fused loss whole / in chunks: four rows
  of one call. (The Triton flash row is gone: jax 0.11 deprecates Pallas'
  Triton backend, and a row costs about a minute of the session.)"""
  chunk = '0,16' if ctx.dry_run else '0,4096'
  preset = [] if ctx.dry_run else ['--preset=10layer', '--dispatch=pallas_mosaic_gpu',
                                   '--batch_per_device=16']
  return _mesh_step(ctx, 'speed_10layer', *preset, '--attention=reference,cudnn',
                    '--cross_entropy=fused', f'--loss_chunk={chunk}')


def step_speed_8x05b(ctx):
  preset = [] if ctx.dry_run else ['--preset=8x0.5b', '--experts=0', '--dispatch=pallas_mosaic_gpu',
                                   '--batch_per_device=8']
  attention = 'reference' if ctx.dry_run else 'reference,cudnn'
  return _mesh_step(ctx, 'speed_8x05b', *preset, f'--attention={attention}')


STEPS = (('workflow', step_workflow), ('tests', step_tests), ('speed_10layer', step_speed_10layer),
         ('speed_8x05b', step_speed_8x05b))


def provenance(argv, log):
  """experiments/provenance.py's record, read by a subprocess so this process
  never starts a JAX backend (the steps need the GPU to themselves)."""
  probe = _run([sys.executable, '-c', (
      'import json, sys, jax; from experiments import provenance; '
      'd = jax.devices()[0]; print(json.dumps(dict(provenance.record(sys.argv[1:]), '
      'platform=d.platform, device_count=jax.device_count())))'),
                os.path.abspath(__file__), *argv], 120, _env(), log)
  return _json_line(probe) or dict(probe_error=probe['tail'])


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  ap = _Parser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='folder for gpu_run.json and the runs')
  ap.add_argument('--dry_run', action='store_true', help='tiny shapes on the CPU')
  ap.add_argument('--steps', default=','.join(n for n, _ in STEPS),
                  help='comma-separated subset of the steps, in their order')
  args = ap.parse_args(argv)
  wanted = args.steps.split(',')
  unknown = sorted(set(wanted) - {n for n, _ in STEPS})
  if unknown:
    print(f'error: --steps: unknown {unknown}; known: {[n for n, _ in STEPS]}', file=sys.stderr)
    return 2
  error = _out_error(args.out)
  if error:
    print(f'error: {error}', file=sys.stderr)
    return 2
  for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(signum, _stop)
  # Every command shares one compilation cache: a program compiled twice (a
  # run and its resumption, a plan and its run) compiles once.
  os.environ.update(JAX_COMPILATION_CACHE_DIR=os.path.join(args.out, 'jax_cache'),
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
  ctx = Context(args.out, args.dry_run)
  record = dict(provenance=provenance(argv, os.path.join(args.out, 'logs', 'provenance.txt')),
                dry_run=args.dry_run, budget_s=ctx.budget, steps={})
  path = os.path.join(args.out, 'gpu_run.json')
  print(f'device: {record["provenance"].get("device")}', flush=True)
  if 'tests' in wanted:
    start_tests(ctx)
  for name, fn in STEPS:
    if name not in wanted:
      continue
    t0 = time.monotonic()
    print(f'[{name}] ...', flush=True)
    try:
      result = fn(ctx)
    except Exception as err:  # pylint: disable=broad-except
      # One step failing must not lose the others.
      result = dict(status='error', error=f'{type(err).__name__}: {err}'[:500])
    result['seconds'] = round(time.monotonic() - t0, 1)
    record['steps'][name] = result
    cpu_step.write_json(path, record)
    print(f'[{name}] {result["status"]} in {result["seconds"]} s', flush=True)
  print(f'wrote {path}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
