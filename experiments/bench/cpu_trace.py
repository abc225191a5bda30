r"""The moe_jax CPU train step under jax.profiler: XLA op time by model part.

  python -m experiments.bench.cpu_trace --out=cpu_trace.json [--cases=moe4] [--steps=5]

Runs cpu_step.py's JaxSide (the trainer's jitted step at the quickstart
shapes) on one core, traces `--steps` steps after a warm-up, and sums each
XLA:CPU thunk's self time (its duration less the thunks nested in it, e.g. a
while loop's body) by the part of the model its HLO instruction comes from:
the `op_name` metadata of the compiled step carries the Flax module path
(`layers_0/attn/...`) and whether the op is forward or backward
(`transpose(jvp(...))`). Time outside any thunk (the Python call, argument
handling, the batch put) is `host`: the step's wall time less the thunks'.
`--top=N` also lists the N costliest instructions (ms per step, part, the
instruction's shape and op), the next thing to look at.
"""
import argparse
import datetime
import glob
import os
import re
import tempfile
import time

from experiments.bench import cpu_step

# First match wins; tested against the op_name of each HLO instruction.
PARTS = (
    # Outside the gradient: clipping, AdamW, schedule, router-bias update, metrics.
    ('optimizer + metrics', r'^(?!.*jvp\()'),
    ('moe: experts', r'/moe/.*(while|ragged_dot)'),   # grouped's loop, ragged's matmuls
    ('moe: router, routing, statistics', r'/moe/'),
    ('dense MLP', r'/mlp/'),
    ('attention', r'/attn/'),
    ('norms', r'_norm/'),
    ('embedding', r'/embed/'),
    ('head + loss', r'jvp\(\)|jvp\(jit|Transformer\)+/[^/]*$'),
    ('residuals', r'/layers_\d+/[^/]*$'),
)


def op_parts(hlo_text, rules=PARTS):
  """{HLO instruction name: part} from the compiled module's metadata (first
  matching rule of `rules`, (part, op_name pattern) pairs)."""
  parts = {}
  for m in re.finditer(r'^\s*(?:ROOT )?(%?[\w.-]+) = .*?op_name="([^"]*)"', hlo_text, re.M):
    name, op_name = m.group(1).lstrip('%'), m.group(2)
    direction = 'bwd' if 'transpose(' in op_name else 'fwd'
    part = next((p for p, pat in rules if re.search(pat, op_name)), 'other')
    parts[name] = part if part == PARTS[0][0] else f'{part} ({direction})'
  return parts


def self_times(events):
  """[(name, self ns)] of nested events on one thread line."""
  events = sorted(events, key=lambda e: (e.start_ns, -e.duration_ns))
  out, stack = [], []   # stack: [name, end, self]
  for e in events:
    while stack and stack[-1][1] <= e.start_ns:
      out.append(stack.pop())
    if stack:
      stack[-1][2] -= e.duration_ns
    stack.append([e.name, e.start_ns + e.duration_ns, e.duration_ns])
  return [(name, self_ns) for name, _, self_ns in out + stack]


def instructions(hlo_text):
  """{HLO instruction name: its shape and op, e.g. 'f32[2048,384] fusion kLoop'}."""
  out = {}
  for m in re.finditer(r'^\s*(?:ROOT )?%?([\w.-]+) = (\S+) ([\w-]+)\((.*)$', hlo_text, re.M):
    kind = re.search(r'kind=(\w+)', m.group(4))
    out[m.group(1)] = ' '.join([re.sub(r'\{.*\}', '', m.group(2)), m.group(3)]
                               + ([kind.group(1)] if kind else []))
  return out


def trace_case(case, dispatch, steps, top=0, attention=''):
  import jax  # pylint: disable=g-import-not-at-top
  side = cpu_step.JaxSide(case, dispatch, {'model.attention': attention} if attention else None)
  side.run(2)
  step_fn = side.program.train_step
  with jax.set_mesh(side.program.state_shardings.step.mesh):
    batch = side._placement.put_batch(side.batch, side.program.batch_sharding)  # pylint: disable=protected-access
    hlo = step_fn.__wrapped__.lower(side.state, batch).compile().as_text()
  parts = op_parts(hlo)
  with tempfile.TemporaryDirectory() as logdir:
    jax.profiler.start_trace(logdir)
    t0 = time.perf_counter()
    side.run(steps)
    wall_ns = (time.perf_counter() - t0) * 1e9
    jax.profiler.stop_trace()
    [path] = glob.glob(os.path.join(logdir, '**', '*.xplane.pb'), recursive=True)
    data = jax.profiler.ProfileData.from_file(path)
  totals, per_op, thunk_ns = {}, {}, 0.0
  for plane in data.planes:
    for line in plane.lines:
      thunks = [e for e in line.events if dict(e.stats).get('hlo_module', '').startswith(
          'jit_train_step')]
      for name, self_ns in self_times(thunks):
        part = parts.get(name, 'other')
        totals[part] = totals.get(part, 0.0) + self_ns
        per_op[name] = per_op.get(name, 0.0) + self_ns
        thunk_ns += self_ns
  totals['host'] = max(wall_ns - thunk_ns, 0.0)
  ms = {p: v / steps / 1e6 for p, v in sorted(totals.items(), key=lambda kv: -kv[1])}
  ops = instructions(hlo)
  costliest = [dict(name=n, ms_per_step=v / steps / 1e6, part=parts.get(n, 'other'),
                    op=ops.get(n, '')) for n, v in sorted(per_op.items(), key=lambda kv: -kv[1])]
  return dict(case=case, dispatch=side.info['dispatch'], attention=side.info['attention'],
              grad_accum_steps=side.info['grad_accum_steps'], step_ms=wall_ns / steps / 1e6,
              ms_per_step=ms, **({'top': costliest[:top]} if top else {}))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='results JSON path')
  ap.add_argument('--cases', default='dense,moe4,moe8')
  ap.add_argument('--dispatch', default='auto')
  ap.add_argument('--steps', type=int, default=5)
  ap.add_argument('--top', type=int, default=0, help='also list the N costliest instructions')
  ap.add_argument('--attention', default='', help="model.attention ('': the config's)")
  args = ap.parse_args(argv)
  cases = cpu_step.parse_cases(ap, args.cases)
  os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1])   # before XLA's thread pool
  load_before = os.getloadavg()
  results = [trace_case(c, args.dispatch, args.steps, args.top, args.attention) for c in cases]
  meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              load_avg_before=load_before, load_avg_after=os.getloadavg(), threads=1,
              steps=args.steps, **cpu_step._versions('jax'))  # pylint: disable=protected-access
  cpu_step.write_json(args.out, dict(meta=meta, results=results))
  for r in results:
    print(f'{r["case"]} ({r["dispatch"]}): {r["step_ms"]:.1f} ms/step wall; ' + ', '.join(
        f'{p} {v:.1f}' for p, v in r['ms_per_step'].items()))
    for op in r.get('top', []):
      print(f'  {op["ms_per_step"]:6.2f} ms  {op["part"]:40s} {op["name"]}: {op["op"]}')


if __name__ == '__main__':
  main()
