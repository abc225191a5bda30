"""Metrics sinks: tensorboardX events in DIR/tb and one JSON line per logged step
in DIR/metrics.jsonl. Only process 0 writes.

A line is appended whole or, if the process dies mid-write, torn at the end of
the file; resuming rewrites the file (atomically) without torn lines or lines
past the resumed step, so it reads like one uninterrupted run.
"""
import json
import os

import jax
import numpy as np

from moe_jax import atomic

# Peak dense bf16 FLOP/s per device, for the MFU estimate (None: not reported).
PEAK_FLOPS = {'H100': 989e12, 'H200': 989e12, 'A100': 312e12, 'TPU v4': 275e12,
              'TPU v5 lite': 197e12, 'TPU v5e': 197e12, 'TPU v5p': 459e12, 'TPU v6': 918e12}


def peak_flops(device):
  kind = getattr(device, 'device_kind', '')
  return next((v for k, v in PEAK_FLOPS.items() if k.lower() in kind.lower()), None)


def _plain(value):
  value = np.asarray(value)
  return value.item() if value.ndim == 0 else value.tolist()


def _step(line):
  """The step of a metrics.jsonl line, or None for a torn one (a crash mid-write)."""
  try:
    step = json.loads(line)['step']
  except (ValueError, KeyError, TypeError):
    return None
  return step if isinstance(step, int) else None


def kept_lines(data, resume_step):
  """The lines of metrics.jsonl bytes `data` that a run resumed at
  `resume_step` keeps: whole records up to that step, each newline-ended."""
  keep = []
  for line in data.decode('ascii', errors='replace').splitlines():   # json.dumps writes ASCII
    step = _step(line)
    if step is not None and step <= resume_step:
      keep.append(line + '\n')
  return keep


class Writer:
  """Appends to metrics.jsonl; on resume, first drops torn lines and lines past
  the resumed step (an atomic rewrite: a kill leaves the old file or the new)."""

  def __init__(self, workdir, resume_step=0):
    self.enabled = jax.process_index() == 0
    if not self.enabled:
      return
    self._path = os.path.join(workdir, 'metrics.jsonl')
    if os.path.exists(self._path):
      with open(self._path, 'rb') as f:
        data = f.read()
      keep = ''.join(kept_lines(data, resume_step)).encode()
      if keep != data:
        atomic.write_bytes(self._path, keep)
    import tensorboardX  # pylint: disable=g-import-not-at-top
    # purge_step drops events a crashed run logged past the resumed step.
    self._tb = tensorboardX.SummaryWriter(os.path.join(workdir, 'tb'),
                                          purge_step=resume_step + 1 if resume_step else None)

  def write(self, step, metrics):
    if not self.enabled:
      return
    record = {'step': int(step), **{k: _plain(v) for k, v in metrics.items()}}
    with open(self._path, 'a') as f:
      f.write(json.dumps(record) + '\n')
    for key, value in record.items():
      if key == 'step':
        continue
      if isinstance(value, str):
        self._tb.add_text(key, value, step)
      elif isinstance(value, list):
        self._tb.add_histogram(key, np.asarray(value), step)
      else:
        self._tb.add_scalar(key, value, step)
    self._tb.flush()

  def close(self):
    if self.enabled:
      self._tb.close()
