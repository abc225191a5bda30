"""Where a results file came from: the record every writer of one stores under
the key `provenance`, and `check_docs` requires of files written from now on.

  record()   # dict(commit, dirty, jax, jaxlib, flax, device, cpu, isa, xla_flags, date, command)

Why each field: two runs of the same config and seed differ by up to 0.013
nats between commits (docs/rerun_drift.md) and by 1e-5 per step
between CPUs of one kind with and without AVX-512, so a number is only
comparable with numbers of the same commit, versions, device and ISA. `isa`
lists the vector extensions XLA:CPU may use (from /proc/cpuinfo); XLA_FLAGS
can cap them (`--xla_cpu_max_isa=AVX2`), so the flags are part of the record.
"""
import datetime
import os
import platform
import shlex
import sys

from moe_jax.workdir import lineage

KEYS = ('commit', 'dirty', 'jax', 'jaxlib', 'flax', 'device', 'cpu', 'isa', 'xla_flags', 'date',
        'command')
# The x86 and Arm vector extensions that change XLA:CPU's kernels, widest first.
_ISA = ('avx512f', 'avx512bw', 'avx512_bf16', 'avx512_vnni', 'amx_tile', 'avx2', 'fma', 'avx',
        'sse4_2', 'sve', 'asimd')


def cpu(cpuinfo='/proc/cpuinfo'):
  """(model name, [the _ISA flags it has]); ('', []) where there is no cpuinfo."""
  try:
    with open(cpuinfo) as f:
      text = f.read()
  except OSError:
    return platform.processor() or platform.machine(), []
  field = lambda *names: next((l.split(':', 1)[1].strip() for l in text.splitlines()
                               if l.split(':', 1)[0].strip() in names), '')
  flags = set(field('flags', 'Features').split())
  return field('model name', 'Processor', 'cpu model'), [f for f in _ISA if f in flags]


def record(argv=None):
  """The provenance of a results file written now, by this process (`argv`:
  the command, default sys.argv)."""
  import flax   # pylint: disable=g-import-not-at-top
  import jax   # pylint: disable=g-import-not-at-top
  import jaxlib   # pylint: disable=g-import-not-at-top
  code = lineage.code_version()
  model, isa = cpu()
  argv = list(sys.argv if argv is None else argv)
  return dict(
      commit=code['git'], dirty=code['dirty'], jax=jax.__version__, jaxlib=jaxlib.__version__,
      flax=flax.__version__, device=jax.devices()[0].device_kind, cpu=model, isa=isa,
      xla_flags=os.environ.get('XLA_FLAGS', ''),
      date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
      command=shlex.join(['python'] + _module(argv[:1]) + argv[1:]))


def _module(argv0):
  """`-m a.b` for a module of this repository run as `python -m a.b` (whose
  argv[0] is its file: a path of this machine, which no doc names)."""
  path = os.path.abspath(argv0[0]) if argv0 else ''
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  if path.endswith('.py') and path.startswith(repo + os.sep):
    return ['-m', os.path.relpath(path, repo)[:-3].replace(os.sep, '.')]
  return [os.path.basename(p) for p in argv0]


def missing(obj):
  """The KEYS a results object's `provenance` lacks (all of them without one)."""
  got = obj.get('provenance') if isinstance(obj, dict) else None
  return list(KEYS) if not isinstance(got, dict) else [k for k in KEYS if k not in got]
