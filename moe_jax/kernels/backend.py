"""Which Pallas backend runs the MoE kernels, and the tile sizes it uses.

`moe_ffn(..., backend=None)` follows `jax.default_backend()`: Triton-lowered
kernels on GPU, Mosaic grouped matmuls on TPU, and the same GPU kernels in
Pallas interpret mode everywhere else (CPU), where they are slow but exact, so
CI checks the kernel bodies that a GPU would compile. `kernels='mosaic_gpu'`
swaps in the Mosaic GPU grouped matmuls (wgmma, TMA; gmm_mgpu.py) for 16-bit
operands on GPU, or in Mosaic GPU's interpret mode on CPU. Asking for a backend the
machine lacks is a ConfigError rather than a silent fallback: a benchmark that
quietly ran in interpret mode would report nonsense.
"""
import dataclasses
import logging

import jax
from jax import lax

from moe_jax.errors import ConfigError

BACKENDS = ('gpu', 'tpu', 'interpret')
KERNELS = ('triton', 'mosaic', 'mosaic_gpu')
_LANES = 128  # TPU vector lanes: Mosaic block widths are multiples of it


@dataclasses.dataclass(frozen=True)
class Backend:
  """Static kernel settings (hashable: it is a nondiff argument of custom_vjps).

  tile_m rows of the expert-sorted buffer form one grouped-matmul tile; every
  expert group is padded to a multiple of it, so it also bounds the padding
  (< tile_m rows per expert). tile_n / tile_k are preferred output and
  contraction tiles, tile_w both output tiles of the weight gradient (tile_n
  when None), tile_t tokens form one combine tile, tile_d columns one
  gather/combine tile; `tile` shrinks each to a block width that divides
  the array and that the kernel language accepts. fuse_gate (mosaic_gpu
  only) runs moe_ffn's SwiGLU gate as one kernel that reads x once for
  wi_0 and wi_1 (gmm.swiglu_gate); it is off until a GPU has timed it
  against the measured default, two gmms and XLA's silu * mul (its backward
  recomputes both products: a third more backward FLOPs for one x read and
  no [R, F] residuals).
  """
  name: str
  interpret: bool
  kernels: str           # one of KERNELS; 'mosaic' is the TPU grid
  tile_m: int
  tile_n: int
  tile_k: int
  tile_t: int
  tile_d: int
  tile_w: int | None = None
  min_tile: int = 1      # tl.dot needs every dot dimension >= 16 on GPU
  num_warps: int = 4
  num_stages: int = 3
  matmul_precision: str | None = None   # a jax.lax.Precision name
  snake_n: int = 8       # mosaic_gpu: column tiles per band of its schedule
  fuse_gate: bool = False  # mosaic_gpu: the SwiGLU gate as one kernel (moe_ffn)

  @property
  def precision(self):
    """The lax.Precision of the kernels' matmuls (None: the kernel
    language's default, TF32 for f32 inputs in Triton)."""
    if self.matmul_precision is None:
      return None
    try:
      return lax.Precision(self.matmul_precision)
    except ValueError:
      raise ConfigError(
          f'pallas matmul_precision={self.matmul_precision!r} is not a '
          'jax.lax.Precision name (default, high, highest, float32, ...)'
      ) from None

  def __post_init__(self):
    self.precision  # pylint: disable=pointless-statement  (checks the name)
    if self.kernels not in KERNELS:
      raise ConfigError(f'pallas kernels={self.kernels!r} is not one of '
                        f'{KERNELS}')
    if not isinstance(self.fuse_gate, bool):
      raise ConfigError(f'pallas fuse_gate={self.fuse_gate!r} must be True or '
                        'False')
    if self.interpret:
      return
    if self.kernels == 'mosaic_gpu':
      tiles = dict(tile_m=self.tile_m, tile_n=self.tile_n, tile_k=self.tile_k,
                   tile_w=self.tile_w or self.tile_n)
      bad = {n: t for n, t in tiles.items() if t % 64}
      if bad or self.tile_m & (self.tile_m - 1) or self.num_stages < 2:
        raise ConfigError(
            f'pallas backend {self.name!r}, kernels=mosaic_gpu: tiles {tiles} must be '
            'multiples of 64 (wgmma rows, one 128-byte bf16 swizzle row), tile_m a power '
            f'of two (the Triton permutes), num_stages={self.num_stages} >= 2')
    if self.kernels == 'mosaic' and self.tile_m % 8:
      raise ConfigError(f'pallas backend {self.name!r}: tile_m={self.tile_m} '
                        'must be a multiple of 8 (TPU sublanes)')
    if self.kernels == 'triton' and (self.tile_m < self.min_tile
                                     or self.tile_m & (self.tile_m - 1)):
      raise ConfigError(f'pallas backend {self.name!r}: tile_m={self.tile_m} '
                        f'must be a power of two >= {self.min_tile}')

  def tile(self, dim, preferred, what):
    """The tile for a dim of `dim` elements, at most `preferred` if possible.

    Triton (and interpret mode): the largest power of two <= preferred that
    divides dim, since Triton blocks are powers of two. Mosaic: the largest
    multiple of 128 lanes <= preferred that divides dim, else the whole dim,
    the two block widths Mosaic accepts.
    """
    if self.kernels == 'mosaic' and not self.interpret:
      for t in range(min(preferred, dim) // _LANES * _LANES, 0, -_LANES):
        if dim % t == 0:
          return t
      return dim
    t = 1
    while t * 2 <= preferred and dim % (t * 2) == 0:
      t *= 2
    if t < self.min_tile:
      raise ConfigError(f'pallas backend {self.name!r}: {what}={dim} needs a '
                        f'power-of-two factor >= {self.min_tile}')
    return t


_PRESETS = {
    # tile_n 256 made the layer's forward+backward 1.20-1.27x faster than 128
    # on an H100 (T 16384, D 2048, four (F, E, k)); the weight gradient holds
    # two output-sized operand tiles a stage, so it keeps 128 to keep 3 stages
    # (docs/benchmarks.md, GPU run).
    'gpu': Backend('gpu', False, 'triton', tile_m=128, tile_n=256, tile_k=64,
                   tile_t=32, tile_d=256, tile_w=128, min_tile=16,
                   num_warps=8, num_stages=3),
    'tpu': Backend('tpu', False, 'mosaic', tile_m=256, tile_n=512, tile_k=512,
                   tile_t=256, tile_d=512),
    # Small tiles so tiny test shapes still span several tiles and groups.
    'interpret': Backend('interpret', True, 'triton', tile_m=8, tile_n=16,
                         tile_k=16, tile_t=8, tile_d=16),
}

# The grouped-matmul tiles of kernels='mosaic_gpu', applied before the
# caller's overrides. On GPU one warpgroup holds the 128 x 128 f32
# accumulator in registers (128 per thread) and tile_k = 64 bf16 elements is
# one 128-byte swizzle row; four stages keep four TMA copies in flight. In
# interpret mode wgmma's smallest row tile (64).
_MOSAIC_GPU = {
    'gpu': dict(tile_n=128, tile_k=64, tile_w=128, num_stages=4),
    'interpret': dict(tile_m=64, tile_n=64, tile_k=64, tile_w=64,
                      num_stages=2, snake_n=2),
}


def _platform():
  name = jax.default_backend()
  return 'gpu' if name in ('gpu', 'cuda', 'rocm') else name


def resolve(backend=None, **overrides):
  """Returns the Backend for a name (None: from jax.default_backend()).

  overrides replace preset fields (tile sizes, or kernels='mosaic' to run the
  TPU kernels in interpret mode), e.g. for tests or tuning. The matmul
  precision follows `jax.default_matmul_precision` at trace time, as XLA's own
  dots do: Pallas would otherwise run f32 matmuls on GPU in TF32.
  """
  platform = _platform()
  if backend is None:
    backend = platform if platform in ('gpu', 'tpu') else 'interpret'
    if backend == 'interpret':
      logging.warning('moe_ffn: no GPU or TPU (jax.default_backend()=%r); '
                      'running the Pallas kernels in interpret mode (exact '
                      'but slow)', platform)
  if backend not in BACKENDS:
    raise ConfigError(f'pallas backend={backend!r} is not one of {BACKENDS}')
  if backend != 'interpret' and backend != platform:
    raise ConfigError(
        f'pallas backend={backend!r} needs a {backend.upper()} but '
        f'jax.default_backend()={platform!r}; use backend=\'interpret\' '
        f'(slow, exact) or moe.dispatch=\'ragged\'')
  overrides.setdefault('matmul_precision',
                       jax.config.jax_default_matmul_precision)
  if overrides.get('kernels') == 'mosaic_gpu':
    if backend == 'tpu':
      raise ConfigError("pallas kernels='mosaic_gpu' needs a GPU (or "
                        "backend='interpret'), not a TPU")
    cc = getattr(jax.devices()[0], 'compute_capability', None)
    if backend == 'gpu' and str(cc) != '9.0':
      raise ConfigError("pallas kernels='mosaic_gpu' is written for Hopper "
                        f'(compute capability 9.0), this GPU has {cc}; use '
                        "kernels='triton'")
    overrides = {**_MOSAIC_GPU[backend], **overrides}
  return dataclasses.replace(_PRESETS[backend], **overrides)


# Shared memory one Triton block may use, by CUDA compute capability (the
# opt-in maximum per block); unknown devices get the smallest common value.
SMEM_PER_BLOCK = {'9.0': 227 * 1024, '8.0': 163 * 1024, '8.7': 163 * 1024}
_SMEM_DEFAULT = 99 * 1024


def _smem_per_block():
  cc = getattr(jax.devices()[0], 'compute_capability', None)
  return SMEM_PER_BLOCK.get(str(cc), _SMEM_DEFAULT)


def compiler_params(b, stage_bytes=0):
  """Triton launch settings on GPU; None elsewhere (Mosaic sets its own).

  stage_bytes is what one pipeline stage of a matmul kernel holds in shared
  memory (its two operand tiles). Triton buffers num_stages of them, so the
  stages are cut to what fits one block: the f32 weight-gradient kernel at the
  GPU tiles needs 128 KiB a stage, and three stages failed to launch on an H100
  (262144 bytes requested, 232448 available; docs/benchmarks.md).
  """
  if b.name != 'gpu':
    return None
  # Imported here: jaxlib builds without Triton support only fail on GPU use.
  from jax.experimental.pallas import triton as plgpu  # pylint: disable=g-import-not-at-top
  stages = b.num_stages
  if stage_bytes:
    stages = max(1, min(stages, _smem_per_block() // stage_bytes))
  return plgpu.CompilerParams(num_warps=b.num_warps, num_stages=stages)
