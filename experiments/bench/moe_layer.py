"""MoE layer benchmark: the Pallas path against dense, ragged and einsum.

  python -m experiments.bench.moe_layer --out=results.json          # GPU / TPU
  python -m experiments.bench.moe_layer --out=results.json --small  # CPU check
  python -m experiments.bench.moe_layer --out=t4k.json --tokens=4096  # a slice
  python -m experiments.bench.moe_layer --out=tune.json --tokens=16384 \
      --tiles=128:128:64:128:8:3,128:256:64:128:8:3                   # tuning
  python -m experiments.bench.moe_layer --out=k.json --kernels=triton,mosaic_gpu \
      --paths= --tokens=16384       # both GPU kernel families, no ragged/einsum
  python -m experiments.bench.moe_layer --out=g.json --paths= --tokens=16384 \
      --kernels=triton,mosaic_gpu,mosaic_gpu_fused   # the fused gate off / on

Times forward and forward+backward of the expert FFN (x -> y, gradients to x,
gates and the three expert weights) over the issue-6 grid: T in {4096, 16384},
D = 2048, F in {1024, 4096}, (E, k) in {(8, 2), (64, 8)}, uniform and skewed
routing, bf16. Every number is measured in the same process, so the ratios
compare like with like:
  pallas  moe_jax.kernels.moe_ffn (dropless), Triton kernels; with
          --kernels=...,mosaic_gpu also pallas_mosaic_gpu (gmm_mgpu.py), with
          ...,mosaic_gpu_fused also pallas_mosaic_gpu_fused (the same
          kernels, the SwiGLU gate as one kernel: Backend.fuse_gate=True)
  dense   a dense SwiGLU FFN on T*k rows: the same 6·T·k·D·F forward FLOPs
  ragged  moe_jax.models.dispatch.ragged (jax.lax.ragged_dot, dropless)
  einsum  moe_jax.models.dispatch.einsum, capacity factor 1.25 (drops tokens)
plus the grouped matmul alone against one dense matmul and against its peers
on the same sorted rows (`jax.lax.ragged_dot`; on GPU jax's own Mosaic GPU
ragged dot, jax.experimental.pallas.ops.gpu; tokamax's Pallas kernels when
that optional package is installed), and dispatch / combine bandwidth against
the device's measured copy bandwidth. `--paths` limits the paths timed
besides the Pallas ones (ragged is still run, in chunks, for the check).
`--tiles` times only the Pallas path at
each tile setting, to choose the GPU preset. `--small` shrinks the
grid so the whole script runs on CPU (Pallas in interpret mode): it checks the
script end to end; its timings mean nothing. Needs only jax and moe_jax.

Before timing, each case checks the Pallas outputs and gradients against the
`ragged` path (both dropless, so they compute the same function; `ragged` in
chunks of tokens, see layer_check.CHUNK) and records
the relative error: a kernel that compiles but computes the wrong thing shows
up as `check.ok = false`, not as a fast number. The JSON is rewritten after
every case, so a run cut short (a device-time limit) keeps what it measured;
--tokens / --d_ff / --experts_k / --routing pick a slice of the grid to split
the grid over several runs.
"""
import argparse
import datetime
import functools
import itertools
import json
import time

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np

from experiments.bench import cpu_step
from experiments.bench import gmm_peers
from experiments.bench import layer_check
from moe_jax.errors import ConfigError
from moe_jax.kernels import backend as backend_lib
from moe_jax.kernels import expert_sort
from moe_jax.kernels import gmm as gmm_lib
from moe_jax.kernels import moe_ffn as moe_ffn_lib
from moe_jax.kernels import permute
from moe_jax.models import dispatch as model_dispatch

FULL = dict(tokens=(4096, 16384), d_model=(2048,), d_ff=(1024, 4096),
            experts_k=((8, 2), (64, 8)), warmup=3, reps=20)
SMALL = dict(tokens=(64,), d_model=(32,), d_ff=(64,),
             experts_k=((4, 2), (8, 8)), warmup=1, reps=3)
ROUTINGS = ('uniform', 'skewed')
# Nominal dense bf16 peaks (vendor spec sheets), for the time-bound ratio only.
PEAK_FLOPS = (('H100 PCIe', 756e12), ('H100', 989e12), ('H200', 989e12))


def _time(fn, args, warmup, reps):
  """Median / min wall time of jitted fn(*args), synced after every call."""
  for _ in range(warmup):
    jax.block_until_ready(fn(*args))
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return float(np.median(times)), float(np.min(times))


def _routing(key, routing, num_tokens, num_experts, top_k):
  """Distinct experts per token by Gumbel top-k; skewed: p(e) ~ 1/(e+1)."""
  k_idx, k_gate = jax.random.split(key)
  logp_E = jnp.zeros(num_experts)
  if routing == 'skewed':
    logp_E = -jnp.log(jnp.arange(1, num_experts + 1, dtype=jnp.float32))
  scores = logp_E + jax.random.gumbel(k_idx, (num_tokens, num_experts))
  idx_Tk = jax.lax.top_k(scores, top_k)[1].astype(jnp.int32)
  gates_Tk = jax.nn.softmax(jax.random.normal(k_gate, (num_tokens, top_k)))
  return idx_Tk, gates_Tk


def _load_stats(idx_Tk, num_experts):
  counts = np.bincount(np.asarray(idx_Tk).reshape(-1), minlength=num_experts)
  return dict(counts=counts.tolist(), max_over_mean=float(counts.max()
                                                          / counts.mean()),
              cv=float(counts.std() / counts.mean()),
              empty_experts=int(np.sum(counts == 0)))


def _fwd_and_grad(fn, diff_argnums):
  """(forward, forward+backward) of fn, jitted; the backward pass gets a fixed
  random cotangent and returns the gradients wrt diff_argnums."""
  def loss(ct, *args):
    return jnp.sum(fn(*args).astype(jnp.float32) * ct)
  grad = jax.grad(loss, argnums=tuple(i + 1 for i in diff_argnums))
  return jax.jit(fn), jax.jit(grad)


def _dense_ffn(x_MD, w0_DF, w1_DF, wo_FD):
  return (jax.nn.silu(x_MD @ w0_DF) * (x_MD @ w1_DF)) @ wo_FD


# A --kernels name besides backend.KERNELS: the Mosaic GPU kernels with the
# SwiGLU gate as one kernel (Backend.fuse_gate=True), to time against the
# default two gmms and XLA's silu * mul in the same process.
FUSED = 'mosaic_gpu_fused'


def _backend(name, backend):
  """The Backend a --kernels name stands for."""
  if name == FUSED:
    return backend_lib.resolve(backend, kernels='mosaic_gpu', fuse_gate=True)
  return backend_lib.resolve(backend, kernels=name)


def _family(b):
  """The --kernels name of a Backend."""
  return FUSED if b.kernels == 'mosaic_gpu' and b.fuse_gate else b.kernels


def _pallas_name(b):
  return 'pallas' if b.kernels == 'triton' else f'pallas_{_family(b)}'


def _gmm_name(b):
  return 'gmm' if b.kernels == 'triton' else f'gmm_{_family(b)}'


def _paths(bs):
  """Each path as fn(x, idx, gates, w0, w1, wo) -> y_TD: one Pallas path per
  kernel family in bs, then ragged and einsum."""
  einsum = functools.partial(model_dispatch.einsum, capacity_factor=1.25)
  paths = {_pallas_name(b): functools.partial(moe_ffn_lib.moe_ffn, backend=b)
           for b in bs}
  paths.update(ragged=lambda *a: model_dispatch.ragged(*a)[0],
               einsum=lambda *a: einsum(*a)[0])
  return paths, lambda *a: einsum(*a)[1]


def _measure(fns, args, warmup, reps):
  """Median seconds of each fn(*args), or an 'error: ...' string."""
  out = {}
  for name, fn in fns.items():
    try:
      out[name] = _time(fn, args, warmup, reps)[0]
    except Exception as e:  # pylint: disable=broad-except
      # One path failing (OOM in einsum's [T, E, C] one-hots, a kernel that
      # does not lower) must not lose the other paths' numbers.
      out[name] = f'error: {type(e).__name__}: {str(e).splitlines()[0][:200]}'
  return out


def _ratio(num, den):
  ok = isinstance(num, float) and isinstance(den, float)
  return num / den if ok else None


def _ms(seconds):
  return {n: v * 1e3 if isinstance(v, float) else v for n, v in seconds.items()}


def _inputs(key, t, d, f, e, k, routing, dtype):
  """(x, idx, gates, w0, w1, wo) and a cotangent for one grid point."""
  ks = jax.random.split(key, 6)
  idx_Tk, gates_Tk = _routing(ks[0], routing, t, e, k)
  x_TD = jax.random.normal(ks[1], (t, d), dtype)
  ws = [jax.random.normal(ks[2], (e, d, f), dtype) / d**0.5,
        jax.random.normal(ks[3], (e, d, f), dtype) / d**0.5,
        jax.random.normal(ks[4], (e, f, d), dtype) / f**0.5]
  args = (x_TD, idx_Tk, gates_Tk.astype(dtype), *ws)
  return args, jax.random.normal(ks[5], (t, d), jnp.float32)


def _routed(x_TD, idx_Tk, num_experts, b):
  """The Pallas path's routing metadata and expert-sorted, padded rows: the
  inputs of its grouped matmul when timed alone."""
  r = jax.jit(lambda i: expert_sort.route(i, num_experts, b.tile_m))(idx_Tk)
  return r, jax.jit(lambda x, r: permute.dispatch(x, r, b))(x_TD, r)


def bench_case(key, t, d, f, e, k, routing, bs, dtype, warmup, reps, peak,
               timed=('ragged', 'einsum')):
  """All measurements for one grid point; bs: one Backend per kernel family,
  Triton's first; timed: the paths besides Pallas and dense to time."""
  b = bs[0]
  args, ct = _inputs(key, t, d, f, e, k, routing, dtype)
  x_TD, idx_Tk, gates_Tk, *ws = args
  # Dense FFN on the T*k routed rows with expert 0's weights: equal FLOPs.
  x_MD = jnp.repeat(x_TD, k, axis=0)
  dense_args = (x_MD, ws[0][0], ws[1][0], ws[2][0])
  ct_dense = jnp.repeat(ct, k, axis=0)

  paths, dropped_fn = _paths(bs)
  pallas = [_pallas_name(one) for one in bs]
  fwd, fwd_bwd = {}, {}
  for name, fn in paths.items():
    fwd[name], fwd_bwd[name] = _fwd_and_grad(fn, (0, 2, 3, 4, 5))
  dense_fwd, dense_grad = _fwd_and_grad(_dense_ffn, (0, 1, 2, 3))
  checks = layer_check.checks(fwd, fwd_bwd, args, ct, pallas)
  keep = set(pallas) | set(timed)
  fwd_s = _measure({'dense': dense_fwd}, dense_args, warmup, reps)
  fwd_s.update(_measure({n: fn for n, fn in fwd.items() if n in keep}, args,
                        warmup, reps))
  bwd_s = _measure({'dense': dense_grad}, (ct_dense, *dense_args), warmup,
                   reps)
  bwd_s.update(_measure({n: fn for n, fn in fwd_bwd.items() if n in keep},
                        (ct, *args), warmup, reps))

  # Pieces of the Pallas path: grouped matmul alone vs one dense matmul of
  # equal FLOPs, and the data movement of dispatch (routing metadata + row
  # gather) and of combine.
  pieces = {}
  for one in reversed(bs):   # each family on rows padded to its own row tile;
    r, x_RD = _routed(x_TD, idx_Tk, e, one)   # Triton's (bs[0]) stay for below
    pieces.update(_measure({_gmm_name(one): jax.jit(functools.partial(
        lambda x, w, r, one: gmm_lib.gmm_raw(x, w, r, one), one=one))},
                           (x_RD, ws[0], r), warmup, reps))
  pieces.update(_measure({'dense_matmul': jax.jit(jnp.matmul)},
                         (x_MD, ws[0][0]), warmup, reps))
  rows_MD, sizes_E = gmm_peers.sorted_rows(x_TD, idx_Tk, e)
  peers = gmm_peers.gmms()
  pieces.update(_measure(peers, (rows_MD, ws[0], sizes_E), warmup, reps))
  pieces.update(_measure({'dispatch': jax.jit(lambda x, i: permute.dispatch(
      x, expert_sort.route(i, e, b.tile_m), b))}, (x_TD, idx_Tk), warmup,
                         reps))
  pieces.update(_measure({'combine': jax.jit(
      lambda y, g, r: permute.combine(y, g, r, b, dtype))},
                         (x_RD, gates_Tk, r), warmup, reps))

  flops_fwd, flops_fb = 6 * t * k * d * f, 18 * t * k * d * f
  row_bytes = t * k * d * jnp.dtype(dtype).itemsize   # the k routed copies
  p_fwd, p_fb = fwd_s[pallas[0]], bwd_s[pallas[0]]
  ratios = {}
  for p, one in zip(pallas[1:], bs[1:]):   # each other family against the first
    gmm = _gmm_name(one)
    ratios[f'{p}_fwd_bwd_speedup_vs_{pallas[0]}'] = _ratio(p_fb, bwd_s[p])
    ratios[f'{p}_fwd_bwd_vs_time_bound'] = (
        _ratio(flops_fb / peak, bwd_s[p]) if peak else None)
    ratios[f'{gmm}_vs_dense_throughput'] = _ratio(pieces['dense_matmul'],
                                                  pieces[gmm])
    ratios.update({f'{gmm}_speedup_vs_{n}': _ratio(pieces[n], pieces[gmm])
                   for n in peers})
    ratios[f'{p}_fwd_bwd_speedup_vs_ragged'] = _ratio(bwd_s.get('ragged'),
                                                      bwd_s[p])
  return dict(
      tokens=t, d_model=d, d_ff=f, experts=e, top_k=k, routing=routing,
      tokens_per_expert_mean=t * k / e, load=_load_stats(idx_Tk, e),
      assignments=t * k, padded_rows=int(r.num_tiles[0]) * b.tile_m,
      einsum_dropped_frac=float(jax.jit(dropped_fn)(*args)),
      check=checks[pallas[0]], checks=checks,
      fwd_ms=_ms(fwd_s), fwd_bwd_ms=_ms(bwd_s), pieces_ms=_ms(pieces),
      tflops={n: dict(fwd=_ratio(flops_fwd / 1e12, fwd_s[n]),
                      fwd_bwd=_ratio(flops_fb / 1e12, bwd_s[n]))
              for n in fwd_s},
      ratios=dict(
          gmm_vs_dense_throughput=_ratio(pieces['dense_matmul'],
                                         pieces['gmm']),
          **{f'gmm_speedup_vs_{n}': _ratio(pieces[n], pieces['gmm'])
             for n in peers},
          fwd_vs_dense_throughput=_ratio(fwd_s['dense'], p_fwd),
          fwd_bwd_vs_dense_throughput=_ratio(bwd_s['dense'], p_fb),
          fwd_bwd_vs_time_bound=(_ratio(flops_fb / peak, p_fb) if peak
                                 else None),
          fwd_speedup_vs_ragged=_ratio(fwd_s.get('ragged'), p_fwd),
          fwd_bwd_speedup_vs_ragged=_ratio(bwd_s.get('ragged'), p_fb),
          fwd_speedup_vs_einsum=_ratio(fwd_s.get('einsum'), p_fwd),
          fwd_bwd_speedup_vs_einsum=_ratio(bwd_s.get('einsum'), p_fb),
          **ratios),
      # Dispatch reads and writes the k routed rows; combine reads them and
      # writes one row per token.
      bandwidth_GBps=dict(
          dispatch=_ratio(2 * row_bytes / 1e9, pieces['dispatch']),
          combine=_ratio((row_bytes + row_bytes // k) / 1e9,
                         pieces['combine'])),
  )


def tune_case(key, t, d, f, e, k, routing, b, dtype, warmup, reps):
  """Pallas forward, forward+backward and grouped matmul alone at one tile
  setting (`--tiles`), for choosing the GPU preset per shape."""
  args, ct = _inputs(key, t, d, f, e, k, routing, dtype)
  fwd, fwd_bwd = _fwd_and_grad(functools.partial(moe_ffn_lib.moe_ffn,
                                                 backend=b), (0, 2, 3, 4, 5))
  r, x_RD = _routed(args[0], args[1], e, b)
  times = _measure({'fwd': fwd}, args, warmup, reps)
  times.update(_measure({'fwd_bwd': fwd_bwd}, (ct, *args), warmup, reps))
  times.update(_measure({'gmm': jax.jit(lambda x, w, r: gmm_lib.gmm_raw(
      x, w, r, b))}, (x_RD, args[3], r), warmup, reps))
  return dict(tokens=t, d_model=d, d_ff=f, experts=e, top_k=k,
              routing=routing, tiles=_tiles(b), ms=_ms(times),
              fwd_bwd_tflops=_ratio(18 * t * k * d * f / 1e12,
                                    times['fwd_bwd']))


def _tiles(b):
  return dict(m=b.tile_m, n=b.tile_n, k=b.tile_k, w=b.tile_w,
              warps=b.num_warps, stages=b.num_stages)


def _tile_sets(text):
  """'128:256:64:128:8:3,...' -> tile overrides (m:n:k:w:warps:stages)."""
  names = ('tile_m', 'tile_n', 'tile_k', 'tile_w', 'num_warps', 'num_stages')
  try:
    sets = [dict(zip(names, [int(v) for v in one.split(':')], strict=True))
            for one in text.split(',')]
  except ValueError:
    raise argparse.ArgumentTypeError(
        f'{text!r} is not a list like 128:256:64:128:8:3 '
        '(m:n:k:w:warps:stages)')
  return tuple(sets)


def copy_bandwidth(num_bytes, warmup, reps):
  """Device read+write bandwidth of an elementwise op over num_bytes (GB/s)."""
  a = jnp.ones((num_bytes // 4,), jnp.float32)
  seconds, _ = _time(jax.jit(lambda v: v * 2.0), (a,), warmup, reps)
  return 2 * num_bytes / seconds / 1e9


def _ints(text):
  return tuple(int(v) for v in text.split(','))


def _pairs(text):
  """'8:2,64:8' -> ((8, 2), (64, 8))."""
  try:
    return tuple(tuple(int(v) for v in pair.split(':')) for pair in
                 text.split(','))
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a list like 8:2,64:8')


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='results JSON path')
  ap.add_argument('--small', action='store_true', help='CPU-sized grid')
  ap.add_argument('--backend', default=None, help='gpu | tpu | interpret')
  ap.add_argument('--dtype', default='bfloat16')
  ap.add_argument('--tokens', type=_ints, help='e.g. 4096 (default: grid)')
  ap.add_argument('--d_ff', type=_ints, help='e.g. 1024,4096')
  ap.add_argument('--experts_k', type=_pairs, help='e.g. 8:2,64:8')
  ap.add_argument('--routing', type=lambda v: tuple(v.split(',')),
                  help='uniform,skewed')
  ap.add_argument('--kernels', type=lambda v: tuple(v.split(',')),
                  default=('triton',), help='Pallas kernel families to time, '
                  'first is the baseline: triton,mosaic_gpu (and '
                  f'{FUSED}: mosaic_gpu with the fused SwiGLU gate)')
  ap.add_argument('--paths', type=lambda v: tuple(p for p in v.split(',') if p),
                  default=('ragged', 'einsum'),
                  help='other paths to time: ragged,einsum (default both)')
  ap.add_argument('--tiles', type=_tile_sets,
                  help='tune instead: time the Pallas path alone at each '
                  'm:n:k:w:warps:stages, e.g. 128:256:64:128:8:3,64:128:64:128:4:3')
  args = ap.parse_args(argv)
  grid = dict(SMALL if args.small else FULL, routing=ROUTINGS)
  for name in ('tokens', 'd_ff', 'experts_k', 'routing'):
    grid[name] = getattr(args, name) or grid[name]
  if not set(grid['routing']) <= set(ROUTINGS):
    raise ConfigError(f'--routing={",".join(grid["routing"])} is not a '
                      f'subset of {",".join(ROUTINGS)}')
  bad = set(args.paths) - {'ragged', 'einsum'}
  if bad:
    raise ConfigError(f'--paths={",".join(args.paths)}: {sorted(bad)} not '
                      'among ragged,einsum')
  bs = [_backend(one, args.backend) for one in args.kernels]
  b = bs[0]
  if b.interpret and not args.small:
    raise ConfigError('the full grid needs a GPU or TPU (pallas backend '
                      "resolved to 'interpret'); pass --small on CPU")
  dev = jax.devices()[0]
  peak = next((p for name, p in PEAK_FLOPS if name in dev.device_kind), None)
  meta = dict(
      date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
      jax=jax.__version__, jaxlib=jaxlib.__version__, platform=dev.platform,
      device=dev.device_kind, device_count=jax.device_count(),
      pallas_backend=b.name, tiles=_tiles(b),
      kernels={_family(one): _tiles(one) for one in bs},
      dtype=args.dtype, small=args.small, nominal_peak_flops=peak,
      grid={n: grid[n] for n in ('tokens', 'd_model', 'd_ff', 'experts_k',
                                 'routing')},
      copy_bandwidth_GBps=copy_bandwidth(2**20 if args.small else 2**30,
                                         grid['warmup'], grid['reps']),
      timing=dict(warmup=grid['warmup'], reps=grid['reps'], statistic='median',
                  sync='jax.block_until_ready after every call, jitted, '
                  'compile excluded by the warm-up calls'),
      routing='uniform: Gumbel top-k over equal logits; skewed: logits '
              'log(1/(e+1)); distinct experts per token; counts in each case')
  cases = itertools.product(grid['tokens'], grid['d_model'], grid['d_ff'],
                            grid['experts_k'], grid['routing'])
  results = []
  key = jax.random.PRNGKey(0)
  for t, d, f, (e, k), routing in cases:
    key, sub = jax.random.split(key)
    if args.tiles:
      for tiles in args.tiles:
        case = tune_case(sub, t, d, f, e, k, routing,
                         backend_lib.resolve(args.backend, **tiles),
                         jnp.dtype(args.dtype), grid['warmup'], grid['reps'])
        results.append(case)
        cpu_step.write_json(args.out, dict(meta=meta, tuning=results))
        print(json.dumps(case), flush=True)
      continue
    case = bench_case(sub, t, d, f, e, k, routing, bs, jnp.dtype(args.dtype),
                      grid['warmup'], grid['reps'], peak, args.paths)
    results.append(case)
    cpu_step.write_json(args.out, dict(meta=meta, results=results))
    print(json.dumps({n: case[n] for n in ('tokens', 'd_ff', 'experts',
                                           'top_k', 'routing', 'check',
                                           'fwd_bwd_ms', 'ratios')}),
          flush=True)


if __name__ == '__main__':
  try:
    main()
  except ConfigError as err:
    raise SystemExit(f'error: {err}') from None
