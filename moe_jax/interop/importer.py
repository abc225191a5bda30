"""A transformers checkpoint or a GGUF file -> a moe_jax workdir.

  config, params, tokenizer, specials, arch = importer.convert(src, base_config)
  summary = importer.import_checkpoint(src, workdir, base_config)

The workdir is the one training writes, so every command reads it:
config.json (`model` and `moe` translated from the source, every other key
from `base_config`, `data.tokenizer='bpe'`), a step-0 checkpoint holding
params only (the trainer starts a fresh optimizer for it), lineage.json
(its root: the source and its SHA-256, moe_jax/workdir/lineage.py), and the
checkpoint's own tokenizer: tokenizer.json and tokenizer_config.json, which
moe_jax/data/tokenizer.py reads with the model's own BOS / EOS / padding.
Everything is read and checked before anything is written; the workdir is
built in a temporary sibling and renamed into place.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np

from moe_jax import containment
from moe_jax.data import pipeline
from moe_jax.data.tokenizer import SPECIALS_FILE
from moe_jax.errors import ConfigError
from moe_jax.interop import archs, gguf_io, layout, safetensors_io, tokens
from moe_jax.models import config as model_config, transformer
from moe_jax.workdir import checkpoint, config_check, digest, files, lineage, run_record, staging


def read(src):
  """(transformers config dict, {hf name: array}, tokenizers.Tokenizer,
  tokenizer_config dict) of a checkpoint directory or a .gguf file."""
  if os.path.isdir(src):
    hf, tensors = safetensors_io.read_dir(src)
    return (hf, tensors, *tokens.from_dir(src, hf))
  if os.path.isfile(src) and src.endswith('.gguf'):
    return gguf_io.read(src)
  raise ConfigError(f'--src={src} is neither a transformers checkpoint directory nor a .gguf file')


def convert(src, base_config):
  """(config, params, tokenizer, specials, arch name): the source in our terms,
  params a nested dict of float32 numpy arrays."""
  hf, tensors, tok, specials = read(src)
  for name, w in tensors.items():   # evaluate refuses such a workdir later; refuse it now
    if w.dtype.kind not in 'biu' and not np.isfinite(np.asarray(w, np.float32)).all():
      raise ConfigError(f'--src={src}: tensor {name} holds non-finite values (NaN or inf)')
  arch, model, moe = archs.from_hf(hf)
  config = base_config.copy_and_resolve_references()
  config.model.update(model)
  config.moe.update(moe)
  config.data.update(tokenizer='bpe', tokenizer_path='',
                     bpe_vocab_size=tok.get_vocab_size(with_added_tokens=True))
  config.init_from = ''
  config_check.check_run(config)   # the checks `main` runs on the keys --config gave
  cfg = model_config.from_config(config)
  if config.data.bpe_vocab_size > cfg.vocab_size:
    raise ConfigError(f'the tokenizer has {config.data.bpe_vocab_size} tokens, more than the '
                      f'model\'s vocab_size={cfg.vocab_size}')
  abstract = transformer.abstract_params(transformer.Transformer(cfg), 1)
  params = layout.from_hf(arch, tensors, abstract, tied=cfg.tie_embeddings)
  return config, params, tok, specials, arch


def import_checkpoint(src, workdir, base_config, overwrite=False):
  """Writes the workdir; returns a summary (arch, params, vocabulary, paths)."""
  if not src:
    raise ConfigError('--src is empty')
  containment.apart(workdir, '--workdir', src, '--src', 'checkpoint')
  workdir = staging.check(workdir, overwrite, '--workdir')
  config, params, tok, specials, arch = convert(src, base_config)
  history = lineage.record_import(workdir, run_record.summary(config), os.path.abspath(src),
                                  digest.file_digest(src), arch=arch)
  with staging.staged(workdir) as tmp:
    files.write_config(tmp, config)
    tok.save(os.path.join(tmp, pipeline.TOKENIZER_FILE))
    files.write_json(os.path.join(tmp, SPECIALS_FILE), specials)
    lineage.write(tmp, history)
    out = checkpoint.Manager(os.path.join(tmp, files.CHECKPOINTS), async_save=False)
    out.save(0, jax.tree.map(jnp.asarray, params),
             meta=dict(imported_from=os.path.abspath(src), arch=arch, lineage=history,
                       config=config.to_dict()))
    out.close()
  return dict(workdir=workdir, arch=arch, source=os.path.abspath(src),
              params=int(sum(x.size for x in jax.tree.leaves(params))),
              vocab_size=config.model.vocab_size, tokenizer_vocab=config.data.bpe_vocab_size)
