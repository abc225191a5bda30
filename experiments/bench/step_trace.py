r"""The trainer's step on one accelerator under jax.profiler: kernel time by model part.

  python -m experiments.bench.step_trace --out=trace.json --preset=10layer \
      --dispatch=pallas_mosaic_gpu --batch=16 [--top=30] [--raw=DIR]

mesh_step.py says how fast the step is; this says where its time goes. It
builds the same step (`moe_jax.train.program.build`, one device, the
synthetic batch of mesh_step), warms it up, traces `--steps` steps and sums
the device time of every kernel by the model part its HLO instruction comes
from (cpu_trace.py's `op_name` rules: Flax module path, forward or backward).
`idle` is the step's wall time less the device's busy time: launch gaps, host
work and waits the device could have overlapped. XLA's GPU command buffers are
turned off (with them the whole step is one event in the trace). `--raw=DIR` also keeps the
trace (`*.xplane.pb`) and the compiled step's HLO text, so a trace taken on a
lent machine can be read again here (`--from_raw=DIR`, no device needed).
On CPU (`--small`) it runs end to end on XLA:CPU's thunks; its times mean
nothing there.
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import tempfile
import time

import jax
import jaxlib

from experiments.bench import cpu_step
from experiments.bench import cpu_trace
from experiments.bench import mesh_step
from moe_jax.train import program as program_lib
from moe_jax.workdir import placement

# The MoE layer's Pallas kernels before cpu_trace's rules, which know only
# XLA's own ops: the grouped matmuls (Triton's and, since jax 0.11, Mosaic
# GPU's, which lower through `mpmd_map`), dispatch and combine.
PARTS = (('moe: pallas kernels', r'/moe/.*(pallas_call|mpmd_map)'),) + cpu_trace.PARTS


def _step_times(data, module_prefix='jit_train_step'):
  """{line: [(HLO instruction, ns)]} of the step's kernels.

  On a device plane (GPU, TPU) a stream runs its kernels one after another,
  and consecutive kernels' timestamps overlap by a fraction of a microsecond,
  so each kernel counts its whole duration; a GPU kernel's name is the
  kernel's, its `hlo_op` stat names the instruction. Without device planes
  (XLA:CPU) the host threads run thunks nested in loops, and each counts its
  self time (cpu_trace.self_times)."""
  device = [p for p in data.planes if p.name.startswith('/device:')]
  out = {}
  for plane in device or data.planes:
    for line in plane.lines:
      events = [e for e in line.events
                if str(dict(e.stats).get('hlo_module', '')).startswith(module_prefix)]
      if not events:
        continue
      if device:
        out[f'{plane.name} {line.name}'] = [
            (str(dict(e.stats).get('hlo_op', e.name)), e.duration_ns) for e in events]
      else:
        out[f'{plane.name} {line.name}'] = cpu_trace.self_times(events)
  return out


def summarize(xplane_path, hlo_text, steps, wall_ns, top):
  """Per-step ms by part, the device's busy time and the costliest instructions."""
  parts = cpu_trace.op_parts(hlo_text, PARTS)
  ops = cpu_trace.instructions(hlo_text)
  data = jax.profiler.ProfileData.from_file(xplane_path)
  totals, per_op, busy_ns, lines = {}, {}, 0.0, {}
  for line, times in _step_times(data).items():
    line_ns = 0.0
    for name, self_ns in times:
      part = parts.get(name, 'other')
      totals[part] = totals.get(part, 0.0) + self_ns
      per_op[name] = per_op.get(name, 0.0) + self_ns
      line_ns += self_ns
    lines[line] = line_ns / steps / 1e6
    busy_ns += line_ns
  totals['idle'] = max(wall_ns - busy_ns, 0.0)
  ms = {p: v / steps / 1e6 for p, v in sorted(totals.items(), key=lambda kv: -kv[1])}
  costliest = [dict(name=n, ms_per_step=v / steps / 1e6, part=parts.get(n, 'other'),
                    op=ops.get(n, '')) for n, v in sorted(per_op.items(), key=lambda kv: -kv[1])]
  return dict(step_ms=wall_ns / steps / 1e6, busy_ms=busy_ns / steps / 1e6,
              ms_per_step=ms, lines_ms=lines, top=costliest[:top])


def trace(config, steps, raw_dir, facts):
  """Traces `steps` steps after a warm-up; writes the trace, the HLO and the
  wall time, with `facts` about the run, into raw_dir (what `summarize_raw`
  reads)."""
  mesh = placement.make_mesh(config.mesh)
  program = program_lib.build(config, mesh)
  state = program_lib.init_state(program, config.seed)
  batch = placement.put_batch(mesh_step.synthetic_batch(config), program.batch_sharding)
  for _ in range(3):   # compile and warm up
    state, metrics = program.train_step(state, batch)
  jax.block_until_ready(metrics['loss'])
  with jax.set_mesh(mesh):
    hlo = program.train_step.__wrapped__.lower(state, batch).compile().as_text()
  with tempfile.TemporaryDirectory() as logdir:
    jax.profiler.start_trace(logdir)
    t0 = time.perf_counter()
    for _ in range(steps):
      state, metrics = program.train_step(state, batch)
    jax.block_until_ready((state.params, metrics['loss']))
    wall_ns = (time.perf_counter() - t0) * 1e9
    jax.profiler.stop_trace()
    [path] = glob.glob(os.path.join(logdir, '**', '*.xplane.pb'), recursive=True)
    shutil.copy(path, os.path.join(raw_dir, 'step.xplane.pb'))
  with open(os.path.join(raw_dir, 'step.hlo.txt'), 'w') as f:
    f.write(hlo)
  dev = jax.devices()[0]
  with open(os.path.join(raw_dir, 'run.json'), 'w') as f:
    json.dump(dict(facts, steps=steps, wall_ns=wall_ns, loss=float(metrics['loss']),
                   device=dev.device_kind, jax=jax.__version__, jaxlib=jaxlib.__version__), f)


def summarize_raw(raw_dir, top):
  """summarize() of what `trace` wrote, and the run's facts (device, versions)."""
  with open(os.path.join(raw_dir, 'run.json')) as f:
    run = json.load(f)
  with open(os.path.join(raw_dir, 'step.hlo.txt')) as f:
    hlo = f.read()
  return summarize(os.path.join(raw_dir, 'step.xplane.pb'), hlo, run['steps'], run['wall_ns'],
                   top), run


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='results JSON path')
  ap.add_argument('--small', action='store_true', help='tiny model: CPU smoke run')
  ap.add_argument('--preset', default=None, help='model preset (default: mesh_step\'s)')
  ap.add_argument('--dispatch', default='auto')
  ap.add_argument('--experts', type=int, default=8, help='moe.num_experts (0: the preset\'s)')
  ap.add_argument('--top_k', type=int, default=2)
  ap.add_argument('--batch', type=int, default=None, help='sequences per step')
  ap.add_argument('--remat', default=None, help='model.remat (models/remat.py)')
  ap.add_argument('--attention', default=None, help='model.attention')
  ap.add_argument('--loss_chunk', type=int, default=None,
                  help='model.loss_chunk (0: the whole batch\'s logits)')
  ap.add_argument('--steps', type=int, default=5)
  ap.add_argument('--top', type=int, default=30, help='list the N costliest instructions')
  ap.add_argument('--raw', default='', help='also keep the trace and HLO in this folder')
  ap.add_argument('--from_raw', default='', help='summarize a --raw folder instead of running')
  args = ap.parse_args(argv)
  grid = dict(mesh_step.SMALL if args.small else mesh_step.FULL)
  grid.update({k: v for k, v in dict(preset=args.preset, remat=args.remat, attention=args.attention,
                                     loss_chunk=args.loss_chunk,
                                     batch_per_device=args.batch).items() if v})
  grid['dispatch'] = args.dispatch
  with tempfile.TemporaryDirectory() as tmp:
    raw_dir = args.from_raw or args.raw or tmp
    if not args.from_raw:
      # XLA's GPU command buffers replay the step as one graph, which the trace
      # shows as a single event. Set before the backend starts.
      os.environ['XLA_FLAGS'] = ' '.join(
          [os.environ.get('XLA_FLAGS', ''), '--xla_gpu_enable_command_buffer=']).strip()
      config, _ = mesh_step.make_config(grid, args.experts, args.top_k, dict(data=1))
      os.makedirs(raw_dir, exist_ok=True)
      trace(config, args.steps, raw_dir,
            dict(grid=grid, experts=args.experts, top_k=args.top_k))
    result, run = summarize_raw(raw_dir, args.top)
  meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              from_raw=bool(args.from_raw),
              timing='device kernel time per step under jax.profiler, after 3 warm-up steps; '
                     'idle = wall time less the busy time of every device line',
              **{k: v for k, v in run.items() if k != 'wall_ns'})
  cpu_step.write_json(args.out, dict(meta=meta, results=[result]))
  print(f'{result["step_ms"]:.1f} ms/step wall, {result["busy_ms"]:.1f} busy: ' + ', '.join(
      f'{p} {v:.1f}' for p, v in result['ms_per_step'].items()))
  for op in result['top']:
    print(f'  {op["ms_per_step"]:7.3f} ms  {op["part"]:40s} {op["name"]}: {op["op"]}')


if __name__ == '__main__':
  main()
