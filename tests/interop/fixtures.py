"""The committed transformers checkpoints of tests/interop/fixtures/ (made by make_fixtures.py)."""
import os

import jax.numpy as jnp
import numpy as np

from configs import common
from moe_jax.models import config as model_config, transformer

HERE = os.path.join(os.path.dirname(__file__), 'fixtures')
NAMES = sorted(n for n in os.listdir(HERE) if os.path.isfile(os.path.join(HERE, n, 'config.json')))
TOKENIZER = os.path.join(HERE, 'tokenizer', 'tokenizer.json')


def path(name):
  return os.path.join(HERE, name)


def reference(name):
  """(tokens [B, L] int32, transformers' logits [B, L, V] float32)."""
  ref = np.load(os.path.join(HERE, name, 'reference.npz'))
  return ref['tokens'], ref['logits']


def base_config():
  config = common.base()
  config.update(seq_len=32, batch_size=8, eval_batches=1)
  return config


def logits(config, params, tokens, batch=None):
  """Our logits; with a packed `batch`, under its segment ids and positions."""
  model = transformer.Transformer(model_config.from_config(config))
  kw = dict(segment_ids=batch['segment_ids'], positions=batch['positions']) if batch else {}
  return np.asarray(model.apply({'params': params}, jnp.asarray(tokens), **kw)[0])
