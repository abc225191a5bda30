r"""MoE FFN on CPU against a dense SwiGLU of equal active FLOPs.

  python -m experiments.bench.cpu_layer --out=cpu_layer.json [--paths=grouped,ragged]

Times forward+backward (gradients to x, gates and the three expert weights)
of each dispatch path of `moe_jax.models.dispatch` and of a dense SwiGLU FFN
on the T·k routed rows (18·T·k·D·F FLOPs both), float32, on the grid of
issue 15: T in {4096, 8192}, D in {96, 256} with F = 2D, E in {4, 8, 16},
k = 2, uniform and skewed routing (moe_layer.py's Gumbel top-k), plus the
fine-grained shape D = 96, F = 64, E = 16. Every path runs dropless (einsum
with capacity factor E / k, so C = T), and before timing each case checks the
path's output gradients against `ragged` and records the relative errors.

Calls of all functions of a case are interleaved (one call each, round robin,
`--reps` rounds after a compiling warm-up), so a change in machine load hits
them alike; each records wall time and the process' CPU time, and `ratio` is
the median over rounds of path time / dense time of the same round.
`--threads` pins the process to that many cores first (XLA:CPU sizes its
thread pool from the affinity); with one thread, CPU time is what the work
costs whatever else the machine runs.
"""
import argparse
import datetime
import itertools
import json
import os
import sys
import time

from experiments import provenance

GRID = dict(tokens=(4096, 8192), d_model=(96, 256), experts=(4, 8, 16),
            routing=('uniform', 'skewed'))
FINE = (96, 64, 16)   # D, F, E of the fine-grained case
TOP_K = 2
CHECK_RTOL = 1e-4     # float32 against float32


def _cases(grid):
  for t, d, e, routing in itertools.product(grid['tokens'], grid['d_model'], grid['experts'],
                                            grid['routing']):
    yield t, d, 2 * d, e, routing
  for t, routing in itertools.product(grid['tokens'], grid['routing']):
    yield t, *FINE, routing


def _median(values):
  values = sorted(values)
  return (values[len(values) // 2] + values[(len(values) - 1) // 2]) / 2


def bench_case(t, d, f, e, routing, paths, reps):
  """Times dense and each path; returns the case's record."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from experiments.bench import moe_layer  # pylint: disable=g-import-not-at-top
  from experiments.bench import layer_check  # pylint: disable=g-import-not-at-top
  from moe_jax.models import dispatch  # pylint: disable=g-import-not-at-top
  ks = jax.random.split(jax.random.key(0), 6)
  idx_Tk, gates_Tk = moe_layer._routing(ks[0], routing, t, e, TOP_K)  # pylint: disable=protected-access
  x_TD = jax.random.normal(ks[1], (t, d))
  ws = [jax.random.normal(ks[2], (e, d, f)) / d**0.5, jax.random.normal(ks[3], (e, d, f)) / d**0.5,
        jax.random.normal(ks[4], (e, f, d)) / f**0.5]
  ct_TD = jax.random.normal(ks[5], (t, d))
  args = (ct_TD, x_TD, idx_Tk, gates_Tk, *ws)
  grads = {}
  for name in dict.fromkeys(('ragged', *paths)):
    fn = dispatch.get(name, capacity_factor=e / TOP_K)   # einsum: C = T, nothing dropped
    grads[name] = moe_layer._fwd_and_grad(lambda *a, fn=fn: fn(*a)[0], (0, 2, 3, 4, 5))[1]  # pylint: disable=protected-access
  dense = moe_layer._fwd_and_grad(moe_layer._dense_ffn, (0, 1, 2, 3))[1]  # pylint: disable=protected-access
  dense_args = (jnp.repeat(ct_TD, TOP_K, axis=0), jnp.repeat(x_TD, TOP_K, axis=0),
                ws[0][0], ws[1][0], ws[2][0])
  want = grads['ragged'](*args)
  check = {}
  for name in paths:
    errs = [layer_check.rel_err(g, w) for g, w in zip(grads[name](*args), want)]  # pylint: disable=protected-access
    check[name] = dict(max_rel_err=max(errs), ok=max(errs) <= CHECK_RTOL)
  fns = {'dense': (dense, dense_args), **{n: (grads[n], args) for n in paths}}
  for fn, a in fns.values():   # compile, then one warm call
    jax.block_until_ready(fn(*a))
    jax.block_until_ready(fn(*a))
  wall = {n: [] for n in fns}
  cpu = {n: [] for n in fns}
  for _ in range(reps):
    for name, (fn, a) in fns.items():
      t0, c0 = time.perf_counter(), time.process_time()
      jax.block_until_ready(fn(*a))
      wall[name].append(time.perf_counter() - t0)
      cpu[name].append(time.process_time() - c0)
  ratio = lambda s, n: _median([p / q for p, q in zip(s[n], s['dense'])])
  return dict(
      tokens=t, d_model=d, d_ff=f, experts=e, top_k=TOP_K, routing=routing, check=check,
      fwd_bwd_ms={n: _median(v) * 1e3 for n, v in wall.items()},
      fwd_bwd_cpu_ms={n: _median(v) * 1e3 for n, v in cpu.items()},
      ratio_vs_dense={n: ratio(wall, n) for n in paths},
      ratio_vs_dense_cpu={n: ratio(cpu, n) for n in paths})


def _line(c):
  paths = ', '.join(f'{n} {c["ratio_vs_dense"][n]:.2f}x (CPU {c["ratio_vs_dense_cpu"][n]:.2f}x'
                    f'{"" if c["check"][n]["ok"] else ", CHECK FAILED"})' for n in c['check'])
  return (f'T={c["tokens"]} D={c["d_model"]} F={c["d_ff"]} E={c["experts"]} {c["routing"]}: '
          f'dense {c["fwd_bwd_ms"]["dense"]:.1f} ms; {paths}')


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='results JSON path')
  ap.add_argument('--paths', default='grouped', help='dispatch paths, comma-separated')
  ap.add_argument('--threads', type=int, default=1, help='cores to pin to')
  ap.add_argument('--reps', type=int, default=7)
  ap.add_argument('--tokens', help='e.g. 4096 (default: 4096,8192)')
  ap.add_argument('--d_model', help='e.g. 96 (default: 96,256)')
  ap.add_argument('--small', action='store_true', help='one tiny case: checks the script')
  args = ap.parse_args(argv)
  cores = os.sched_getaffinity(0)
  os.sched_setaffinity(0, sorted(cores)[:args.threads])
  try:
    _run(args, ap)
  finally:
    os.sched_setaffinity(0, cores)


def _run(args, ap):
  import jax, jaxlib  # pylint: disable=g-import-not-at-top,multiple-imports
  from moe_jax.models import dispatch  # pylint: disable=g-import-not-at-top
  paths = args.paths.split(',')
  unknown = [p for p in paths if p not in dispatch.NAMES]
  if unknown:
    ap.error(f'--paths: {unknown} not in {dispatch.NAMES}')
  grid = dict(GRID)
  for key in ('tokens', 'd_model'):
    if getattr(args, key):
      grid[key] = tuple(int(v) for v in getattr(args, key).split(','))
  cases = list(_cases(grid))
  if args.small:
    cases = [(64, 16, 32, 4, 'skewed')]
  meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              jax=jax.__version__, jaxlib=jaxlib.__version__,
              device=jax.devices()[0].device_kind, threads=args.threads,
              load_avg_before=os.getloadavg(), dtype='float32', paths=paths,
              resolved={p: dispatch.resolve(p) for p in paths},
              timing=(f'jitted fwd+bwd, 2 warm-up calls, then {args.reps} rounds of one call '
                      'per function (interleaved), each synced; medians of wall and process '
                      'CPU time; ratios are medians of per-round path / dense'))
  results = []
  for case in cases:
    results.append(bench_case(*case, paths, args.reps))
    print(_line(results[-1]), flush=True)
    meta['load_avg_after'] = os.getloadavg()
    tmp = args.out + '.tmp'
    with open(tmp, 'w') as f:
      json.dump(dict(meta=meta, results=results, provenance=provenance.record()), f, indent=1)
    os.replace(tmp, args.out)
  if not all(c['check'][p]['ok'] for c in results for p in paths):
    sys.exit('error: a path does not match ragged (see check in the JSON)')


if __name__ == '__main__':
  main()
