r"""Attention alone on CPU: the blocked loop against the whole-array reference.

  python -m experiments.bench.cpu_attention --out=cpu_attention.json [--reps=9]

Times forward+backward (gradients to q, k and v) of `kernels/attention_cpu.py`'s
two paths, float32, packed causal batches of documents of ~L/4 tokens, at
  quickstart  B=16, L=128, H=4, G=2, K=24 (configs/quickstart.py)
  d256        B=4,  L=512, H=8, G=4, K=32 (d_model 256 / seq_len 512)
Before timing, each case checks the blocked output and gradients against the
reference. Calls are interleaved (one call per path, round robin, `--reps`
rounds after a compiling warm-up) so a change in machine load hits both
alike; each records wall and process CPU time, and `ratio` is the median over
rounds of blocked / reference. The process is pinned to `--threads` cores
first (XLA:CPU sizes its thread pool from the affinity).

With torch installed (optional), torch's scaled_dot_product_attention runs in
the same rounds, same threads (torch.set_num_threads), GQA (enable_gqa) and
`is_causal=True` with no segment mask: its fused CPU kernel, which packed
batches could not use, so the comparison favours torch.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

from experiments import provenance
from experiments.bench import cpu_step

CASES = {'quickstart': (16, 128, 4, 2, 24), 'd256': (4, 512, 8, 4, 32)}
CHECK_RTOL = 1e-4


def _inputs(b, length, h, g, k):
  import jax, jax.numpy as jnp  # pylint: disable=g-import-not-at-top,multiple-imports
  ks = jax.random.split(jax.random.key(0), 4)
  q = jax.random.normal(ks[0], (b, g, (h // g) * length, k))
  kk, v = (jax.random.normal(x, (b, g, length, k)) for x in ks[1:3])
  seg = jnp.cumsum(jax.random.uniform(ks[3], (b, length)) < 4 / length, axis=1).astype(jnp.int32)
  return q, kk, v, seg, seg, jnp.arange(length)


def _torch_sdpa(b, length, h, g, k):
  """A fwd+bwd closure of torch SDPA at these shapes, or None without torch."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  torch.set_num_threads(len(os.sched_getaffinity(0)))
  gen = torch.Generator().manual_seed(0)
  q = torch.randn(b, h, length, k, generator=gen, requires_grad=True)
  kk, v = (torch.randn(b, g, length, k, generator=gen, requires_grad=True) for _ in range(2))
  dout = torch.randn(b, h, length, k, generator=gen)

  def run():
    for t in (q, kk, v):
      t.grad = None
    out = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True,
                                                           enable_gqa=True)
    out.backward(dout)
  return run


def _summary(v):
  return dict(median=statistics.median(v) * 1e3, min=min(v) * 1e3, max=max(v) * 1e3)


def bench_case(name, reps):
  import jax, jax.numpy as jnp  # pylint: disable=g-import-not-at-top,multiple-imports
  from moe_jax.kernels import attention_cpu  # pylint: disable=g-import-not-at-top
  args = _inputs(*CASES[name])
  dout = jax.random.normal(jax.random.key(1), args[0].shape)

  def fwd_bwd(fn):
    def f(*a):
      out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, *a[3:]), *a[:3])
      return out, vjp(dout)
    return jax.jit(f)

  # The model's call without a cache: query blocks skip the masked keys.
  block = attention_cpu.query_block(CASES[name][1])
  blocked = lambda *a: attention_cpu.blocked(*a, query_block=block)
  fns = {'reference': fwd_bwd(attention_cpu.reference), 'blocked': fwd_bwd(blocked)}
  got, want = fns['blocked'](*args), fns['reference'](*args)
  errs = [float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))
          for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want))]
  torch_fn = _torch_sdpa(*CASES[name])
  if torch_fn:
    fns['torch_sdpa'] = lambda *a: torch_fn()
  for fn in fns.values():
    jax.block_until_ready(fn(*args))
  wall = {n: [] for n in fns}
  cpu = {n: [] for n in fns}
  for _ in range(reps):
    for n, fn in fns.items():
      t0, c0 = time.perf_counter(), time.process_time()
      jax.block_until_ready(fn(*args))
      wall[n].append(time.perf_counter() - t0)
      cpu[n].append(time.process_time() - c0)
  ratio = lambda s, over='reference': sorted(b / r for b, r in zip(s['blocked'], s[over]))
  vs_torch = {}
  if torch_fn:
    vs_torch = dict(ratio_blocked_over_torch_sdpa_cpu=statistics.median(ratio(cpu, 'torch_sdpa')),
                    ratio_reference_over_torch_sdpa_cpu=statistics.median(
                        sorted(a / b for a, b in zip(cpu['reference'], cpu['torch_sdpa']))))
  return dict(**vs_torch, case=name, query_block=block,
              shape=dict(zip(('B', 'L', 'H', 'G', 'K'), CASES[name])),
              check=dict(max_rel_err=max(errs), ok=max(errs) <= CHECK_RTOL),
              fwd_bwd_ms={n: _summary(v) for n, v in wall.items()},
              fwd_bwd_cpu_ms={n: _summary(v) for n, v in cpu.items()},
              ratio_blocked_over_reference=statistics.median(ratio(wall)),
              ratio_blocked_over_reference_cpu=statistics.median(ratio(cpu)),
              ratio_cpu_range=[ratio(cpu)[0], ratio(cpu)[-1]])


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='results JSON path')
  ap.add_argument('--threads', type=int, default=1, help='cores to pin to')
  ap.add_argument('--reps', type=int, default=9)
  ap.add_argument('--cases', default=','.join(CASES), help=f'of {list(CASES)}')
  args = ap.parse_args(argv)
  cases = args.cases.split(',')
  if any(c not in CASES for c in cases):
    ap.error(f'--cases={args.cases}: each must be one of {list(CASES)}')
  if not 1 <= args.threads <= len(os.sched_getaffinity(0)):
    ap.error(f'--threads={args.threads}: this process may use {len(os.sched_getaffinity(0))} cores')
  os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
  import jax, jaxlib  # pylint: disable=g-import-not-at-top,multiple-imports
  try:
    import torch  # pylint: disable=g-import-not-at-top
    torch_version = torch.__version__
  except ImportError:
    torch_version = None
  now = datetime.datetime.now(datetime.timezone.utc)
  meta = dict(torch=torch_version, date=now.isoformat(timespec='seconds'),
              jax=jax.__version__, jaxlib=jaxlib.__version__, threads=args.threads,
              cpu=cpu_step._cpu_model(),  # pylint: disable=protected-access
              machine_cores=os.cpu_count(), load_avg_before=os.getloadavg(),
              dtype='float32', timing=(f'jitted fwd+bwd, 1 warm-up call, then {args.reps} '
                                       'interleaved rounds; ms medians with min/max'))
  results = []
  for name in cases:
    results.append(bench_case(name, args.reps))
    r = results[-1]
    print(f'{name}: reference {r["fwd_bwd_cpu_ms"]["reference"]["median"]:.1f} CPU-ms, '
          f'blocked {r["fwd_bwd_cpu_ms"]["blocked"]["median"]:.1f} CPU-ms, '
          f'ratio {r["ratio_blocked_over_reference_cpu"]:.2f}x, '
          f'vs torch {r.get("ratio_blocked_over_torch_sdpa_cpu", float("nan")):.2f}x, '
          f'check {r["check"]}', flush=True)
  meta['load_avg_after'] = os.getloadavg()
  with open(args.out + '.tmp', 'w') as f:
    json.dump(dict(meta=meta, results=results, provenance=provenance.record()), f, indent=1)
  os.replace(args.out + '.tmp', args.out)
  if not all(r['check']['ok'] for r in results):
    sys.exit('error: blocked does not match the reference (see check in the JSON)')


if __name__ == '__main__':
  main()
