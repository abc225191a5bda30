"""A config's model as growth runs it: the flax module and its LM loss.

A leaf of upcycle/, so that transition (preservation report), utility
(expert scores from gradients) and merge_router (router inputs) build the
source model one way without importing each other.
"""
from moe_jax.models import config as model_config, losses, transformer


def model(config):
  return transformer.Transformer(model_config.from_config(config))


def lm_loss(config):
  """loss(params, batch): the mean next-token cross-entropy of `config`'s model."""
  module = model(config)

  def loss_fn(params, batch):
    logits, _ = module.apply({'params': params}, batch['inputs'],
                             segment_ids=batch['segment_ids'], positions=batch['positions'])
    return losses.cross_entropy(logits, batch['targets'], batch['loss_mask'])[0]

  return loss_fn
