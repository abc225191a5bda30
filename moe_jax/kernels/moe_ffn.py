"""The Pallas MoE FFN: dispatch, grouped SwiGLU matmuls, combine.

  y_TD = sum_j gates[t, j] * FFN_{idx[t, j]}(x[t]),  FFN = SwiGLU (reference.py)

Same contract as `reference.moe_ffn`, dropless, and differentiable in x,
gates and all three expert weights, with one extension: idx[t, j] equal to
num_experts means "no expert", which adds 0 to y[t], costs no FLOPs and gives
gates[t, j] a zero gradient (`expert_sort.route`). Expert parallelism uses it for
the empty rows of its receive buffer (moe_jax/parallel/expert.py).

The pieces each carry a custom VJP whose backward passes are kernels too:
dispatch <-> combine swap roles (`permute`), and each grouped matmul's
backward is an input-gradient grouped matmul plus a per-expert weight-gradient
kernel (`gmm`). The SwiGLU nonlinearity between them is elementwise XLA,
differentiated by JAX; on the Mosaic GPU kernels (16-bit operands,
`Backend.fuse_gate`) the gate is one kernel instead, silu(x @ wi_0) *
(x @ wi_1) with x read once, whose backward recomputes both products
(`gmm.swiglu_gate`).

The Mosaic GPU kernels need D and F in whole tiles (128 at the GPU tiles).
For any other width (seed 002's 8x15m and 8x44m: d_model 320 and 480),
`_padded` zero-pads x and the weights to the next multiple and slices y back:
zero columns of x and zero rows of the weights add nothing to any product,
silu(0) * 0 = 0 in the padded F columns, and the padding's gradients are
sliced away by the pad's own transpose. It costs a padded copy of the expert
weights per step and the padded columns' FLOPs.

FLOPs: 6·T·k·D·F forward and 12·T·k·D·F backward on routed rows (16·T·k·D·F
with the fused gate, which recomputes its two products), plus at most
tile_m - 1 padding rows per non-empty expert.
"""
import math

import jax.numpy as jnp

from moe_jax.errors import ConfigError
from moe_jax.kernels import backend as backend_lib
from moe_jax.kernels import expert_sort
from moe_jax.kernels import gmm as gmm_lib
from moe_jax.kernels import permute


def _check_shapes(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD):
  e, d, f = wi_0_EDF.shape
  if x_TD.ndim != 2 or x_TD.shape[1] != d:
    raise ConfigError(f'moe_ffn: x_TD shape {x_TD.shape} does not match '
                      f'wi_0_EDF shape {wi_0_EDF.shape}')
  if wi_1_EDF.shape != (e, d, f) or wo_EFD.shape != (e, f, d):
    raise ConfigError(f'moe_ffn: expert weights wi_1 {wi_1_EDF.shape} / wo '
                      f'{wo_EFD.shape} do not match wi_0 {wi_0_EDF.shape}')
  if idx_Tk.shape != gates_Tk.shape or idx_Tk.shape[0] != x_TD.shape[0]:
    raise ConfigError(f'moe_ffn: idx_Tk {idx_Tk.shape} and gates_Tk '
                      f'{gates_Tk.shape} must both be [T={x_TD.shape[0]}, k]')


def moe_ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, *,
            backend=None, kernels=None):
  """Routes each token to its k experts and sums their gated SwiGLU outputs.

  backend: None (from jax.default_backend(): 'gpu', 'tpu', else 'interpret'),
  one of backend.BACKENDS, or a backend.Backend (custom tiles / kernels).
  kernels: None (the backend's own) or a kernel family of backend.KERNELS,
  e.g. 'mosaic_gpu', for a backend given by name.
  """
  _check_shapes(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD)
  if isinstance(backend, backend_lib.Backend):
    if kernels not in (None, backend.kernels):
      raise ConfigError(f'moe_ffn: kernels={kernels!r} disagrees with the given '
                        f'backend\'s kernels={backend.kernels!r}')
    b = backend
  else:
    b = backend_lib.resolve(backend, **({} if kernels is None else
                                        dict(kernels=kernels)))
  multiple = _pad_multiple(b, x_TD, wi_0_EDF, wi_1_EDF, wo_EFD)
  d, f = wi_0_EDF.shape[1:]
  if d % multiple or f % multiple:
    return _padded(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, b, multiple)
  routing = expert_sort.route(idx_Tk, wi_0_EDF.shape[0], b.tile_m)
  x_RD = permute.dispatch(x_TD, routing, b)
  a_RF = gmm_lib.swiglu(x_RD, wi_0_EDF, wi_1_EDF, routing, b)
  y_RD = gmm_lib.gmm(a_RF, wo_EFD, routing, b)
  return permute.combine(y_RD, gates_Tk, routing, b, x_TD.dtype)


def _pad_multiple(b, *operands):
  """What D and F must be multiples of: every tile a Mosaic GPU kernel cuts
  them into (contraction, output, weight-gradient and gate tiles); 1 for the
  Triton and TPU kernels, which choose tiles that divide the array."""
  if not gmm_lib.on_mosaic_gpu(b, *operands):
    return 1
  return math.lcm(b.tile_k, b.tile_n, b.tile_w or b.tile_n)


def _padded(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, b, multiple):
  """moe_ffn with D and F zero-padded up to `multiple` (module docstring)."""
  d, f = wi_0_EDF.shape[1:]
  pd, pf = -d % multiple, -f % multiple
  pad = lambda a, *widths: jnp.pad(a, [(0, 0)] + [(0, w) for w in widths])
  y_TD = moe_ffn(pad(x_TD, pd), idx_Tk, gates_Tk, pad(wi_0_EDF, pd, pf), pad(wi_1_EDF, pd, pf),
                 pad(wo_EFD, pf, pd), backend=b)
  return y_TD[:, :d]
