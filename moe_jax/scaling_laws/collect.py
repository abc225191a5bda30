"""Runs table rows from moe_jax workdirs (a sweep's output, for example).

Each workdir holds config.json (the run's ConfigDict) and metrics.jsonl (one
JSON object per logged step; eval steps carry `val_loss`). A row takes:
  loss      the last val_loss, which must be logged at config.total_steps
  N1        non-embedding parameters of the dense counterpart (moe.num_experts
            = 0) of the model, or of the source model for an upcycled run
  N2, N_total, P, n_expert, top_k   from moe_jax.models.accounting, for the
            model at the end of the run (after an in-run upcycle, the grown one)
  kind, D1, D2:
    from scratch        dense | moe;  D1 = total_steps * batch_size * seq_len, D2 = 0
    upcycle.step = tau  upcycled;     D1 = tau * batch * seq, D2 = (T - tau) * batch * seq
    init_from = CKPT    upcycled;     D2 = this run's tokens, D1 = the source's
    (or upcycle.source, as the upcycle CLI writes it)
                        tokens (its step if CKPT is a step directory, else its
                        total_steps) from the source's config.json.
"""
import json
import os

import ml_collections

from moe_jax.errors import ConfigError
from moe_jax.models import accounting, config as model_config
from moe_jax.upcycle import transition


def _read_config(workdir):
  path = os.path.join(workdir, 'config.json')
  if not os.path.isfile(path):
    raise ConfigError(f'workdir {workdir}: no config.json')
  with open(path) as f:
    try:
      return ml_collections.ConfigDict(json.load(f))
    except json.JSONDecodeError as e:
      raise ConfigError(f'{path}: not JSON ({e.msg})')


def last_val_loss(workdir):
  """(step, val_loss) of the last metrics.jsonl record that has val_loss."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.isfile(path):
    raise ConfigError(f'workdir {workdir}: no metrics.jsonl')
  last = None
  with open(path) as f:
    for i, line in enumerate(f):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError:
        raise ConfigError(f'{path}: line {i + 1} is not JSON')
      if 'val_loss' in record:
        last = (int(record['step']), float(record['val_loss']))
  if last is None:
    raise ConfigError(f'{path}: no record has val_loss')
  return last


def _counts(config):
  """(N1, N2, N_total): N1 from the dense counterpart (seed 002 eqs. 4-6)."""
  # The vocabulary only sizes the embedding, which these counts leave out.
  cfg = model_config.ModelConfig.from_config(config, vocab_size=1)
  dense = config.copy_and_resolve_references()
  dense.moe.num_experts = 0
  dense_cfg = model_config.ModelConfig.from_config(dense, vocab_size=1)
  c = accounting.counts(cfg)
  return accounting.counts(dense_cfg).active_nonembed, c.active_nonembed, c.total_nonembed


def _tokens(config, steps):
  return float(steps) * config.batch_size * config.seq_len


def _source_tokens(init_from):
  """Tokens behind the checkpoint `init_from` (a workdir or a step directory)."""
  path = os.path.abspath(os.path.expanduser(init_from))
  if not os.path.exists(path):
    raise ConfigError(f'init_from={init_from}: no such path')
  step = int(os.path.basename(path)) if os.path.basename(path).isdigit() else None
  workdir = path
  for _ in range(3):   # a step directory sits in <workdir>/checkpoints/<step>
    if os.path.isfile(os.path.join(workdir, 'config.json')):
      break
    workdir = os.path.dirname(workdir)
  else:
    raise ConfigError(f'init_from={init_from}: no config.json in it or its parents')
  config = _read_config(workdir)
  return config, _tokens(config, config.total_steps if step is None else step)


def row(workdir):
  """One runs-table row (a dict with table.COLUMNS) for a workdir."""
  config = _read_config(workdir)
  for key in ('total_steps', 'batch_size', 'seq_len', 'model', 'moe'):
    if key not in config:
      raise ConfigError(f'{workdir}/config.json: missing key {key!r}')
  step, loss = last_val_loss(workdir)
  if step != config.total_steps:
    raise ConfigError(f'{workdir}: last val_loss is at step {step}, not total_steps='
                      f'{config.total_steps} (unfinished run?)')
  n1 = _counts(config)[0]
  final = transition.config_at(config, config.total_steps)   # the grown model, if any
  _, n2, n_total = _counts(final)
  tau = config.get('upcycle', {}).get('step', 0)
  init_from = config.get('init_from', '') or config.get('upcycle', {}).get('source', '')
  if tau and init_from:
    raise ConfigError(f'{workdir}: both a source checkpoint and upcycle.step are set; D1 is '
                      'ambiguous')
  if tau:
    kind, d1, d2 = 'upcycled', _tokens(config, tau), _tokens(config, config.total_steps - tau)
  elif init_from:
    source, d1 = _source_tokens(init_from)
    n1 = _counts(source)[0]
    kind, d2 = 'upcycled', _tokens(config, config.total_steps)
  else:
    kind = 'moe' if config.moe.num_experts else 'dense'
    d1, d2 = _tokens(config, config.total_steps), 0.0
  return {'kind': kind, 'N1': n1, 'N2': n2, 'N_total': n_total, 'D1': d1, 'D2': d2,
          'P': n_total / n2, 'n_expert': final.moe.num_experts, 'top_k': final.moe.top_k,
          'loss': loss, 'workdir': workdir}


def collect(workdirs):
  if not workdirs:
    raise ConfigError('collect: no workdirs given')
  return [row(w) for w in workdirs]
