"""Metrics sinks: tensorboardX events in DIR/tb and one JSON line per logged step
in DIR/metrics.jsonl. Only process 0 writes."""
import json
import os

import jax
import numpy as np

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
  """The step of a metrics.jsonl line; a torn last line (a crash mid-write) is dropped."""
  try:
    return json.loads(line)['step']
  except (json.JSONDecodeError, KeyError, TypeError):
    return float('inf')


class Writer:
  """Appends to metrics.jsonl; on resume, first drops lines past the resumed step
  so that the file reads like one uninterrupted run."""

  def __init__(self, workdir, resume_step=0):
    self.enabled = jax.process_index() == 0
    if not self.enabled:
      return
    self._path = os.path.join(workdir, 'metrics.jsonl')
    if os.path.exists(self._path):
      with open(self._path) as f:
        keep = [line for line in f if _step(line) <= resume_step]
      with open(self._path, 'w') as f:
        f.writelines(keep)
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
      if isinstance(value, list):
        self._tb.add_histogram(key, np.asarray(value), step)
      else:
        self._tb.add_scalar(key, value, step)
    self._tb.flush()

  def close(self):
    if self.enabled:
      self._tb.close()
