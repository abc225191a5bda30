"""A moe_jax checkpoint -> a transformers checkpoint directory.

  files = exporter.hf_files(config, params, arch, tokenizer)   # in memory
  summary = exporter.export_checkpoint(ckpt, out, arch='auto')

The directory holds a model card (README.md: what was exported from where,
and the lineage chain of how the model was grown, moe_jax/workdir/lineage.py),
config.json, generation_config.json, model.safetensors
(float32, the per-expert tensor names transformers and vLLM load:
`block_sparse_moe.experts.{e}.w1` for Mixtral, `mlp.experts.{e}.gate_proj`
for Qwen3-MoE) and the tokenizer (tokenizer.json, tokenizer_config.json; our
byte tokenizer becomes an equivalent byte-level tokenizer.json). What the
architecture cannot express is refused by moe_jax/interop/archs.py before
the params are read. The MoE layers compute dropless in
transformers, which is our `ragged` dispatch; a model run with capacity-factor
dispatch (`einsum`) differs there exactly when it drops tokens.
"""
import dataclasses
import json
import os

import tokenizers

from moe_jax import containment
from moe_jax.data import pipeline
from moe_jax.data import tokenizer as tokenizer_lib
from moe_jax.interop import archs, layout, safetensors_io, tokens
from moe_jax.models import config as model_config, transformer
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint, lineage, lineage_table, staging

CARD_FILE = 'README.md'


@dataclasses.dataclass
class HfFiles:
  config: dict
  generation_config: dict
  tensors: dict             # {transformers name: float32 array}
  tokenizer: tokenizers.Tokenizer
  specials: dict            # tokenizer_config.json
  card: str = ''            # README.md, written when set

  def write(self, directory):
    for name, content in (('config.json', self.config),
                          ('generation_config.json', self.generation_config),
                          (tokenizer_lib.SPECIALS_FILE, self.specials)):
      with open(os.path.join(directory, name), 'w') as f:
        json.dump(content, f, indent=2)
    self.tokenizer.save(os.path.join(directory, pipeline.TOKENIZER_FILE))
    safetensors_io.write_file(os.path.join(directory, safetensors_io.SINGLE), self.tensors)
    if self.card:
      with open(os.path.join(directory, CARD_FILE), 'w') as f:
        f.write(self.card)


def model_card(arch, source, record, step):
  """README.md for the Hub: the front matter it indexes, what this is, and
  the lineage chain, so a grown model says where its weights came from."""
  return '\n'.join([
      '---', 'library_name: transformers', 'tags:', '- moe_jax', f'- {arch}', '---', '',
      f'# {arch} exported by moe_jax', '',
      f'Exported from the moe_jax checkpoint `{source}` (step {step}) by '
      '`python -m moe_jax.interop.export_hf`.', '',
      lineage_table.markdown(record, step)])


def _tokenizer_files(tok):
  """(tokenizers.Tokenizer, tokenizer_config dict) for one of our tokenizers."""
  if isinstance(tok, tokenizer_lib.ByteTokenizer):
    return tokens.byte_level()
  specials = tok.specials or tokens.specials(
      tok.tok, *(None if i is None else tok.tok.id_to_token(i)
                 for i in (tok.bos_id, tok.eos_id, tok.pad_id)), add_bos=tok.bos_id is not None)
  return tok.tok, specials


def hf_files(config, params, arch, tok):
  """HfFiles of the model (`config`, `params`) as `arch` (an archs.Arch)."""
  hf_tok, specials = _tokenizer_files(tok)
  ids = tokenizer_lib.BpeTokenizer(hf_tok, 'the exported tokenizer', specials)
  vocab = hf_tok.get_vocab(with_added_tokens=True)
  bos = vocab.get(tokenizer_lib.token_content(specials.get('bos_token')))
  hf = archs.to_hf(config, arch, bos, ids.eos_id, ids.pad_id)
  generation = dict(bos_token_id=bos, eos_token_id=ids.eos_id, pad_token_id=ids.pad_id)
  max_len = hf['max_position_embeddings']
  return HfFiles(hf, generation, layout.to_hf(arch.name, params), hf_tok,
                 dict(specials, model_max_length=max_len))


def export_checkpoint(ckpt, out, arch='auto', overwrite=False):
  """Writes the transformers directory `out`; returns a summary."""
  # The whole workdir is the source: --out inside it writes into a training
  # run, and --out equal to or above it with --overwrite would delete it.
  containment.apart(out, '--out', os.path.dirname(checkpoint.resolve(ckpt)[0]), '--ckpt',
                    'workdir')
  out = staging.check(out, overwrite, '--out')
  manager, step, directory = checkpoint.open_step(ckpt)
  # The model at that step (the grown one past an in-run upcycle).
  config = transition.config_at(checkpoint.workdir_config(ckpt), step)
  config = config.copy_and_resolve_references()
  tok = pipeline.tokenizer_for(config, os.path.dirname(directory), train=False)
  config.model.vocab_size = config.model.vocab_size or tok.vocab_size
  target = archs.pick(config, arch)   # refusals before the params are read
  model = transformer.Transformer(model_config.from_config(config))
  params = manager.restore(step, transformer.abstract_params(model, 1))['params']
  manager.close()
  files = hf_files(config, params, target, tok)
  source = os.path.join(directory, str(step))
  files.card = model_card(target.name, source, lineage.at_checkpoint(source)[0], step)
  with staging.staged(out) as tmp:
    files.write(tmp)
  return dict(out=out, arch=target.name, ckpt=source, tensors=len(files.tensors))
