"""A checkpoint as a model to run: config, module, params and tokenizer.

  loaded = restore.load(ckpt)     # CKPT: a workdir (newest step) or a step directory
  logits, _ = loaded.model.apply({'params': loaded.params}, tokens)

For readers of a finished run (moe_jax.generate): params on one device,
the config the checkpoint was saved under (the grown one past an in-run
upcycle) and the workdir's own tokenizer; nothing is written.
"""
import dataclasses
import os

from moe_jax.data import pipeline
from moe_jax.models import config as model_config, transformer
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint


@dataclasses.dataclass
class Loaded:
  config: object        # the ConfigDict, vocab_size filled in
  model: transformer.Transformer
  params: dict
  tokenizer: object
  step: int
  path: str             # the step directory


def load(ckpt, config=None):
  """Loaded of CKPT; `config` overrides the workdir's config.json."""
  manager, step, directory = checkpoint.open_step(ckpt)
  config = transition.config_at(config or checkpoint.workdir_config(ckpt), step)
  config = config.copy_and_resolve_references()
  tokenizer = pipeline.tokenizer_for(config, os.path.dirname(directory), train=False)
  config.model.vocab_size = config.model.vocab_size or tokenizer.vocab_size
  model = transformer.Transformer(model_config.from_config(config))
  params = manager.restore(step, transformer.abstract_params(model, 1))['params']
  manager.close()
  return Loaded(config, model, params, tokenizer, int(step), os.path.join(directory, str(step)))
