"""A checkpoint's tokenizer as the two files a workdir keeps.

`tokenizer.json` (HF `tokenizers`) plus `tokenizer_config.json` with the
special tokens (`bos_token`, `eos_token`, `pad_token`, `add_bos_token`,
`chat_template`), the pair moe_jax/data/tokenizer.py reads. Made here:
  from_dir   a transformers directory's own files, special tokens resolved
             (named in tokenizer_config.json, or by id in config.json);
  from_gguf  rebuilt from GGUF metadata: the vocabulary id by id, the merges
             in order, the pre-tokenizer llama.cpp applies for
             `tokenizer.ggml.pre`, control tokens as special tokens;
  byte_level for export: our byte tokenizer as an equivalent tokenizer.json.
`add_bos_token` is always written out, so a reader need not guess it.
"""
import os

import tokenizers
from tokenizers import AddedToken, decoders, models, pre_tokenizers

from moe_jax.data import tokenizer as tokenizer_lib
from moe_jax.errors import ConfigError
from moe_jax.workdir import files

_CONTROL, _USER_DEFINED = 3, 4   # tokenizer.ggml.token_type values
# tokenizer.ggml.pre -> the pre-tokenizer llama.cpp splits text with (llama-vocab.cpp).
_PRE = {
    'gpt-2': lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    # Every digit alone, then GPT-2's split: SmolLM's own tokenizer.json.
    'smollm': lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
}


def specials(tok, bos=None, eos=None, pad=None, add_bos=None, chat_template=None):
  """The tokenizer_config.json we write, checked against `tok`: unknown names
  are errors, and `add_bos_token` is explicit (if not given: whether `tok`'s
  own post-processor prepends the BOS)."""
  out = dict(tokenizer_class='PreTrainedTokenizerFast', bos_token=bos, eos_token=eos,
             pad_token=pad, add_bos_token=add_bos, chat_template=chat_template)
  out = {k: v for k, v in out.items() if v is not None}
  resolved = tokenizer_lib.BpeTokenizer(tok, 'the imported tokenizer', out)
  return dict(out, add_bos_token=resolved.bos_id is not None)


def _read_json(path):
  return files.read_json(path) if os.path.isfile(path) else {}


def from_dir(path, hf_config):
  """(tokenizers.Tokenizer, tokenizer_config dict) of a transformers directory."""
  tok_path = os.path.join(path, 'tokenizer.json')
  if not os.path.isfile(tok_path):
    raise ConfigError(f'{path} has no tokenizer.json (a sentencepiece tokenizer.model alone is '
                      'not read; save the tokenizer with transformers first)')
  tok = tokenizer_lib.BpeTokenizer.load(tok_path).tok
  cfg = _read_json(os.path.join(path, tokenizer_lib.SPECIALS_FILE))
  ids = {**hf_config, **_read_json(os.path.join(path, 'generation_config.json'))}
  names = {}
  for key in ('bos', 'eos', 'pad'):
    name = tokenizer_lib.token_content(cfg.get(f'{key}_token'))
    token_id = ids.get(f'{key}_token_id')
    token_id = token_id[0] if isinstance(token_id, list) and token_id else token_id
    if name is None and isinstance(token_id, int):
      name = tok.id_to_token(token_id)
    names[key] = name
  template = cfg.get('chat_template')
  jinja = os.path.join(path, 'chat_template.jinja')
  if template is None and os.path.isfile(jinja):
    with open(jinja) as f:
      template = f.read()
  return tok, specials(tok, names['bos'], names['eos'], names['pad'], cfg.get('add_bos_token'),
                       template)


def from_gguf(meta):
  """(tokenizers.Tokenizer, tokenizer_config dict) rebuilt from GGUF metadata."""
  kind, pre = meta.get('tokenizer.ggml.model'), meta.get('tokenizer.ggml.pre')
  if kind != 'gpt2':
    raise ConfigError(f'GGUF tokenizer.ggml.model={kind!r} is not supported; supported: gpt2 '
                      '(byte-level BPE)')
  if pre not in _PRE:
    raise ConfigError(f'GGUF tokenizer.ggml.pre={pre!r} is not supported; supported: '
                      f'{", ".join(sorted(_PRE))}')
  vocab_list = list(meta['tokenizer.ggml.tokens'])
  vocab = {t: i for i, t in enumerate(vocab_list)}
  if len(vocab) != len(vocab_list):
    raise ConfigError('GGUF tokenizer.ggml.tokens repeats a token; ids would not round-trip')
  merges = [tuple(m.split(' ')) for m in meta.get('tokenizer.ggml.merges', ())]
  if any(len(m) != 2 for m in merges):
    raise ConfigError('GGUF tokenizer.ggml.merges has an entry that is not "left right"')
  tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
  tok.pre_tokenizer = _PRE[pre]()
  tok.decoder = decoders.ByteLevel()
  types = list(meta.get('tokenizer.ggml.token_type', ()))
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                          for t, ty in zip(vocab_list, types) if ty == _CONTROL])
  tok.add_tokens([AddedToken(t, special=False, normalized=False)
                  for t, ty in zip(vocab_list, types) if ty == _USER_DEFINED])
  name = lambda key: (vocab_list[meta[f'tokenizer.ggml.{key}_token_id']]
                      if f'tokenizer.ggml.{key}_token_id' in meta else None)
  return tok, specials(tok, name('bos'), name('eos'), name('padding'),
                       meta.get('tokenizer.ggml.add_bos_token'),
                       meta.get('tokenizer.chat_template'))


def _bytes_to_unicode():
  """GPT-2's byte -> printable character map (what ByteLevel pre-tokenizers use)."""
  keep = [*range(ord('!'), ord('~') + 1), *range(ord('¡'), ord('¬') + 1),
          *range(ord('®'), ord('ÿ') + 1)]
  chars, extra = {}, 0
  for b in range(256):
    if b in keep:
      chars[b] = chr(b)
    else:
      chars[b] = chr(256 + extra)
      extra += 1
  return chars


def byte_level():
  """(tokenizers.Tokenizer, tokenizer_config dict) encoding as ByteTokenizer:
  <pad> <bos> <eos> are ids 0..2 and byte b is id b + 3."""
  chars = _bytes_to_unicode()
  vocab = {name: i for i, name in enumerate(tokenizer_lib.SPECIALS)}
  vocab.update({chars[b]: b + len(tokenizer_lib.SPECIALS) for b in range(256)})
  tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                          for s in tokenizer_lib.SPECIALS])
  pad, bos, eos = tokenizer_lib.SPECIALS
  return tok, specials(tok, bos, eos, pad, True)
