"""Compiles the Pallas MoE kernels to H100 (sm_90a) binaries, without a GPU.

  pip install triton==3.9.0
  python -m experiments.bench.triton_compile

On GPU, each pallas_call lowers to a Triton (tt dialect) module that XLA turns
into a cubin only when the program is compiled on the device, so exporting for
'cuda' on a CPU host checks nothing past the module itself. This script
finishes the job with the triton wheel's compiler for GPUTarget('cuda', 90, 32)
(TTIR -> TTGIR -> LLVM IR -> PTX -> cubin, with the ptxas the wheel ships),
which is where shared-memory overflow, unsupported layouts and register
spills show up. No GPU and no CUDA driver are used.

Every kernel of one forward+backward pass of `moe_ffn` is compiled at the
issue-6 grid (T in {4096, 16384}, D = 2048, F in {1024, 4096}, (E, k) in
{(8, 2), (64, 8)}, bf16) with the 'gpu' backend preset. The table gives the
launch grid, the dynamic shared memory the kernel asks for, ptxas' registers
per thread and spill bytes, and the MMA instruction family in the PTX. The
exit status is 1 if a kernel fails to compile or exceeds an sm_90 per-block
limit (CUDA C++ Programming Guide, "Technical Specifications per Compute
Capability", 9.0: 227 KB shared memory per block, 64K registers per block,
255 per thread).

Caveat: on a device XLA compiles the same module with the Triton pinned in
jaxlib, whose pass pipeline is close to the wheel's but not identical, so the
numbers are the wheel's. Imports only jax, moe_jax and triton.
"""
import contextlib
import io
import itertools
import os
import re
import sys
import tempfile

import jax
import jax.numpy as jnp
from jax import export
from jax._src.pallas.triton import lowering as pallas_triton_lowering

from moe_jax.kernels import backend as backend_lib
from moe_jax.kernels import expert_sort
from moe_jax.kernels import gmm as gmm_lib
from moe_jax.kernels import permute

TRITON_VERSION = '3.9.0'   # the wheel this was checked with
try:
  # pylint: disable=g-import-not-at-top
  import triton
  from triton.backends.compiler import GPUTarget
except ImportError:
  sys.exit('experiments.bench.triton_compile needs triton: '
           f'pip install triton=={TRITON_VERSION}')

GRID = dict(tokens=(4096, 16384), d_model=(2048,), d_ff=(1024, 4096),
            experts_k=((8, 2), (64, 8)))
TARGET = GPUTarget('cuda', 90, 32)
MAX_SHARED = 227 * 1024        # bytes per block, sm_90 opt-in maximum
MAX_REGS_BLOCK = 64 * 1024     # 32-bit registers per block
MAX_REGS_THREAD = 255


class _Captured(Exception):
  """Carries a kernel's Triton module out of the lowering, which stops there:
  with newer jaxlibs the next step compiles it with jaxlib's own Triton, which
  needs the CUDA plugin."""

  def __init__(self, ttir, grid):
    super().__init__()
    self.ttir, self.grid = ttir, grid


@contextlib.contextmanager
def _capture_triton_modules():
  """Makes the Pallas Triton lowering raise _Captured with the module text."""
  original = pallas_triton_lowering.lower_jaxpr_to_triton_module

  def capture(*args, **kwargs):
    result = original(*args, **kwargs)
    raise _Captured(result.module.operation.get_asm(enable_debug_info=False),
                    tuple(result.grid))

  pallas_triton_lowering.lower_jaxpr_to_triton_module = capture
  try:
    yield
  finally:
    pallas_triton_lowering.lower_jaxpr_to_triton_module = original


def triton_module(fn, args):
  """(TTIR text, launch grid) of the single pallas_call in fn(*args), lowered
  for CUDA (the lowering falls back to sm_90 when no GPU is present)."""
  with _capture_triton_modules():
    try:
      export.export(jax.jit(fn), platforms=['cuda'])(*args)
    except _Captured as captured:
      return captured.ttir, captured.grid
  raise RuntimeError('no Pallas Triton kernel was lowered')


def kernels(num_tokens, d_model, d_ff, num_experts, top_k, b):
  """(label, fn, abstract args) of each kernel in moe_ffn's forward and
  backward pass: the same calls moe_ffn and its VJPs make, at their shapes."""
  s = jax.ShapeDtypeStruct
  bf16 = jnp.bfloat16
  routing = jax.eval_shape(
      lambda i: expert_sort.route(i, num_experts, b.tile_m),
      s((num_tokens, top_k), jnp.int32))
  rows = routing.row_token_R.shape[0]
  x_TD, x_RD, h_RF = (s((num_tokens, d_model), bf16), s((rows, d_model), bf16),
                      s((rows, d_ff), bf16))
  w_EDF, w_EFD = s((num_experts, d_model, d_ff), bf16), s(
      (num_experts, d_ff, d_model), bf16)
  weight_R, gates_Tk = s((rows,), bf16), s((num_tokens, top_k), bf16)
  slot_Tk = routing.slot_Tk
  return [
      ('moe_dispatch',
       lambda x, r, w: permute.gather_rows(x, r.row_token_R, w, r, b, bf16),
       (x_TD, routing, weight_R)),
      ('moe_gmm fwd x@wi', lambda a, w, r: gmm_lib.gmm_raw(a, w, r, b),
       (x_RD, w_EDF, routing)),
      ('moe_gmm fwd a@wo', lambda a, w, r: gmm_lib.gmm_raw(a, w, r, b),
       (h_RF, w_EFD, routing)),
      ('moe_gmm dx=dh@wi^T',
       lambda a, w, r: gmm_lib.gmm_raw(a, w, r, b, transpose_rhs=True),
       (h_RF, w_EDF, routing)),
      ('moe_gmm da=dy@wo^T',
       lambda a, w, r: gmm_lib.gmm_raw(a, w, r, b, transpose_rhs=True),
       (x_RD, w_EFD, routing)),
      ('moe_tgmm dwi', lambda a, d, r: gmm_lib.tgmm_raw(a, d, r, b, bf16),
       (x_RD, h_RF, routing)),
      ('moe_tgmm dwo', lambda a, d, r: gmm_lib.tgmm_raw(a, d, r, b, bf16),
       (h_RF, x_RD, routing)),
      ('moe_combine',
       lambda y, sl, g: permute.combine_rows(y, sl, g, b, bf16),
       (x_RD, slot_Tk, gates_Tk)),
      ('moe_gate_grad', lambda dy, y, sl: permute.gate_grad(dy, y, sl, b),
       (x_TD, x_RD, slot_Tk)),
  ]


def compile_sm90(ttir, num_warps, num_stages):
  """Compiles TTIR text to a cubin; returns (shared bytes, registers per
  thread, spill bytes, MMA family). Raises on any compilation error."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'kernel.ttir')
    with open(path, 'w') as f:
      f.write(ttir)
    # A fresh cache makes ptxas run every time, so its log is always there.
    triton.knobs.cache.dir = os.path.join(tmp, 'cache')
    triton.knobs.nvidia.dump_ptxas_log = True
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
      kernel = triton.compile(path, target=TARGET, options=dict(
          num_warps=num_warps, num_stages=num_stages, enable_fp_fusion=True))
  log = log.getvalue()
  regs = int(re.search(r'Used (\d+) registers', log).group(1))
  spills = sum(int(n) for n in re.findall(r'(\d+) bytes spill', log))
  ptx = kernel.asm['ptx']
  mma = ('wgmma' if 'wgmma' in ptx else 'mma.sync' if 'mma.sync' in ptx
         else '-')
  return kernel.metadata.shared, regs, spills, mma


def limit_error(shared, regs, num_warps):
  """Why a compiled kernel cannot launch on sm_90, or None."""
  if shared > MAX_SHARED:
    return f'shared memory {shared} B > {MAX_SHARED} B per block'
  if regs > MAX_REGS_THREAD or regs * num_warps * 32 > MAX_REGS_BLOCK:
    return f'{regs} registers x {num_warps * 32} threads > {MAX_REGS_BLOCK}'
  return None


def main():
  b = backend_lib._PRESETS['gpu']  # pylint: disable=protected-access
  print(f'jax {jax.__version__}, triton {triton.__version__}, target sm_90a, '
        f'num_warps={b.num_warps}, num_stages={b.num_stages}')
  header = ('T', 'D', 'F', 'E', 'k', 'kernel', 'grid', 'shared_B', 'regs',
            'spill_B', 'mma', 'status')
  fmt = ('{:>6} {:>5} {:>5} {:>3} {:>2}  {:<20} {:<15} {:>8} {:>4} {:>7} '
         '{:<8} {}')
  print(fmt.format(*header))
  failures = 0
  for t, d, f, (e, k) in itertools.product(
      GRID['tokens'], GRID['d_model'], GRID['d_ff'], GRID['experts_k']):
    for label, fn, args in kernels(t, d, f, e, k, b):
      grid, stats, status = '', ('', '', '', ''), 'ok'
      try:
        ttir, launch = triton_module(fn, args)
        grid = 'x'.join(map(str, launch))
        stats = compile_sm90(ttir, b.num_warps, b.num_stages)
        status = limit_error(stats[0], stats[1], b.num_warps) or 'ok'
      except Exception as err:  # pylint: disable=broad-except
        first = (str(err).strip().splitlines() or [''])[0]
        status = f'{type(err).__name__}: {first}'
      failures += status != 'ok'
      print(fmt.format(t, d, f, e, k, label, grid, *stats, status),
            flush=True)
  print(f'{failures} kernel(s) failed' if failures else 'all kernels compiled')
  sys.exit(1 if failures else 0)


if __name__ == '__main__':
  main()
