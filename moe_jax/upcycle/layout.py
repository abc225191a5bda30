"""Where copies go: replica slots for E -> mE and layer maps for depth growth.

Both are plain numpy, computed from the configs (and utility scores) before the
jitted map, so the ops see them as constants.

Replica layouts (`Slots`, one per MoE layer):
  append    the E source experts keep slots 0..E-1; replicas follow, in
            source order (seed 003: new experts "concatenated with the
            original ones").
  in_place  each source's copies are contiguous, original first:
            [e0, e0', e1, e1', ...]. With uniform counts, expert-parallel shard
            s of the target holds exactly the copies of the experts of source
            shard s, so an in-run transition moves no expert across devices.

Depth growth (`depth_map`, seeds 003 and 004) duplicates *units*: after the
`moe.first_dense` leading dense layers (kept once, in place), the stack is cut
into units of `moe.every` layers, the period of the dense/MoE pattern (one
layer for all-MoE or dense models). Units, not layers, are copied, so an
interleaved [dense, moe] stack stays interleaved under every method:
  stack       u1..un, u1..un, ... (`factor` times; seed 003 eq. 1)
  interpose   u1 x factor, u2 x factor, ... (seed 003 eq. 2)
  dus         depth up-scaling by `percent` (seed 004 §4.5): k = round(n *
              percent / 100) more units. Seed 004 does not say which units it
              replicates; `placement` picks:
                spread  k units evenly spaced over depth (unit floor((i + 1/2)
                        n / k) for i < k), each right after itself;
                solar   the middle k units repeated as one block: units
                        0..b+k-1, then b..n-1, b = floor((n - k) / 2). This is
                        SOLAR 10.7B's depth up-scaling (Kim et al., 2023: two
                        copies of the model, the last layers cut from one and
                        the first from the other), which named the method. On
                        SmolLM2-135M at 40 % it raises the loss far less than
                        spread (docs/moesturizer.md).
"""
import dataclasses

import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config

LAYOUTS = ('append', 'in_place')
DEPTH_METHODS = ('stack', 'interpose', 'dus')
DUS_PLACEMENTS = ('spread', 'solar')


@dataclasses.dataclass(frozen=True)
class Slots:
  src_of: np.ndarray   # [mE] int: source expert of each target expert
  replica: np.ndarray  # [mE] bool: False on the one exact original of each source
  counts: np.ndarray   # [E] int: copies of each source expert (>= 1, sum mE)


def replica_slots(counts, layout):
  counts = np.asarray(counts, np.int64)
  if layout not in LAYOUTS:
    raise ConfigError(f'upcycle.args.layout={layout!r} is not one of {LAYOUTS}')
  if layout == 'in_place':
    src_of = np.repeat(np.arange(len(counts)), counts)
    replica = np.concatenate([np.arange(c) > 0 for c in counts])
  else:
    extra = np.repeat(np.arange(len(counts)), counts - 1)
    src_of = np.concatenate([np.arange(len(counts)), extra])
    replica = np.arange(len(src_of)) >= len(counts)
  return Slots(src_of.astype(np.int32), replica, counts)


def grouped(slots, group):
  """Slots of experts from slots of virtual groups of `group` contiguous
  experts (a fine-grained MoE's): group j's copy is experts j G .. j G + G - 1, kept
  contiguous and in order, so a copied group stays whole wherever it goes."""
  member = np.arange(group)
  return Slots((slots.src_of[:, None] * group + member).reshape(-1).astype(np.int32),
               np.repeat(slots.replica, group), np.repeat(slots.counts, group))


def layer_kinds(config):
  """'moe' or 'dense' per layer, by the model's own pattern rule."""
  cfg = model_config.from_config(config, vocab_size=1)
  return ['moe' if cfg.is_moe_layer(i) else 'dense' for i in range(cfg.num_layers)]


def _units(config):
  first = config.moe.first_dense if config.moe.num_experts else 0
  period = config.moe.every if config.moe.num_experts else 1
  body = config.model.num_layers - first
  if body <= 0 or body % period:
    raise ConfigError(f'depth growth needs model.num_layers - moe.first_dense = {body} to be a '
                      f'positive multiple of moe.every={period}')
  return first, period, body // period


def depth_map(src_config, method, factor=2, percent=0.0, placement='spread'):
  """Source layer index of each target layer."""
  if method not in DEPTH_METHODS:
    raise ConfigError(f'upcycle.args.method={method!r} is not one of {DEPTH_METHODS}')
  first, period, n = _units(src_config)
  if method == 'dus':
    k = int(round(n * percent / 100))
    if not 0 < k <= n:
      raise ConfigError(f'upcycle.args.percent={percent} duplicates {k} of {n} layer units; '
                        'need between 1 and all of them')
    if placement not in DUS_PLACEMENTS:
      raise ConfigError(f'upcycle.args.placement={placement!r} is not one of {DUS_PLACEMENTS}')
    if placement == 'solar':
      b = (n - k) // 2
      units = list(range(b + k)) + list(range(b, n))
    else:
      chosen = {int((i + 0.5) * n / k) for i in range(k)}
      units = [u for u in range(n) for _ in range(2 if u in chosen else 1)]
  else:
    if int(factor) != factor or factor < 2:
      raise ConfigError(f'upcycle.args.factor={factor} must be an integer >= 2')
    units = (list(range(n)) * factor if method == 'stack'
             else [u for u in range(n) for _ in range(factor)])
  return list(range(first)) + [first + u * period + j for u in units for j in range(period)]
