"""Tokenizers: byte-level (default, nothing to train) and BPE via HF `tokenizers`.

Both expose `vocab_size`, `pad_id`, `bos_id` (None when the vocabulary has no
BOS), `eos_id`, `encode(text) -> int32 array`, `encode_batch(texts)`,
`decode(ids) -> str`, and `fingerprint` (identifies the vocabulary, so a
tokenised corpus can be cached per tokenizer).

Ids 0, 1, 2 are <pad>, <bos>, <eos> in both of ours. Padding is marked by
`segment_ids == 0`, never by the token id; pad id 0 only fills the padded
slots, so a model never sees a real token with the padding's id. The byte
tokenizer maps byte b to id b + 3 (vocab_size 259). Every document is packed as
<bos> text <eos>: <eos> teaches the model where a document ends, <bos> gives
the first real token something to be predicted from.

A tokenizer that came with a pretrained model (moe_jax/interop) keeps its own
special tokens in a `tokenizer_config.json` beside its `tokenizer.json`, the
transformers file of that name: `bos_token`, `eos_token`, `pad_token`,
`add_bos_token` (whether a document starts with the BOS) and `chat_template`.
`BpeTokenizer.load` reads it when it is there; without it the ids are found by
the usual token names.
"""
import hashlib
import json
import os

import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from moe_jax.errors import ConfigError

SPECIALS = ('<pad>', '<bos>', '<eos>')
TOKENIZER_FILE = 'tokenizer.json'   # a trained BPE's file, in a workdir or a prepared corpus
SPECIALS_FILE = 'tokenizer_config.json'
# Names other tokenizer.json files use, tried in order, for ones not trained here.
_EOS_NAMES = ('<eos>', '</s>', '<|endoftext|>', '<|end_of_text|>')
_BOS_NAMES = ('<bos>', '<s>', '<|begin_of_text|>')


class _Fingerprinted:
  """Equal and hashable by vocabulary, so caches can key on a tokenizer."""

  def __eq__(self, other):
    return self.fingerprint == getattr(other, 'fingerprint', None)

  def __hash__(self):
    return hash(self.fingerprint)


class ByteTokenizer(_Fingerprinted):
  """UTF-8 bytes offset by 3 past the three special ids."""
  pad_id, bos_id, eos_id = 0, 1, 2
  offset = len(SPECIALS)
  vocab_size = 256 + offset
  fingerprint = 'byte'

  def encode(self, text):
    # surrogateescape: a command-line argument with a byte that is not UTF-8
    # arrives as a lone surrogate (PEP 383); it encodes back to that byte.
    return np.frombuffer(text.encode('utf-8', 'surrogateescape'), np.uint8).astype(
        np.int32) + self.offset

  def encode_batch(self, texts):
    return [self.encode(t) for t in texts]

  def decode(self, ids):
    ids = np.asarray(ids)
    return bytes((ids[ids >= self.offset] - self.offset).astype(np.uint8)).decode(
        'utf-8', errors='replace')


class BpeTokenizer(_Fingerprinted):
  """A HF `tokenizers.Tokenizer`; encodes without its own special-token post-processing
  (the packer adds <bos>/<eos>).

  `specials` is a tokenizer_config.json dict (see the module docstring); an
  absent `add_bos_token` means "as the tokenizer's own post-processor does".
  """

  def __init__(self, tok, source='tokenizer', specials=None):
    self.tok = tok
    self.specials = dict(specials or {})
    vocab = tok.get_vocab(with_added_tokens=True)
    self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
    named = {key: token_content(self.specials.get(key))
             for key in ('bos_token', 'eos_token', 'pad_token')}
    for key, name in named.items():
      if name is not None and name not in vocab:
        raise ConfigError(f'{source}: {key} {name!r} is not in the vocabulary')
    guess = lambda names: next((vocab[n] for n in names if n in vocab), None)
    bos = vocab[named['bos_token']] if named['bos_token'] else guess(_BOS_NAMES)
    self.eos_id = vocab[named['eos_token']] if named['eos_token'] else guess(_EOS_NAMES)
    self.pad_id = vocab[named['pad_token']] if named['pad_token'] else vocab.get('<pad>', 0)
    add_bos = self.specials.get('add_bos_token', None if self.specials else True)
    if add_bos is None:
      add_bos = bos is not None and tok.encode('a').ids[:1] == [bos]
    self.bos_id = bos if add_bos else None
    if self.eos_id is None:
      raise ConfigError(f'{source} has no end-of-document token (one of {", ".join(_EOS_NAMES)}'
                        f' or {SPECIALS_FILE}:eos_token)')
    self.chat_template = self.specials.get('chat_template')
    text = tok.to_str() + (json.dumps(self.specials, sort_keys=True) if self.specials else '')
    self.fingerprint = 'bpe:' + hashlib.sha256(text.encode()).hexdigest()

  @classmethod
  def load(cls, path):
    """tokenizer.json at `path`, with the tokenizer_config.json beside it if any."""
    try:
      tok = tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises plain Exception on unreadable files
      raise ConfigError(f'data.tokenizer_path: cannot read {path} as a tokenizer.json '
                        f'({str(e).splitlines()[0] if str(e) else type(e).__name__})') from e
    specials = None
    specials_path = os.path.join(os.path.dirname(path), SPECIALS_FILE)
    if os.path.isfile(specials_path):
      try:
        with open(specials_path) as f:
          specials = json.load(f)
      except ValueError as e:
        raise ConfigError(f'{specials_path} is not valid JSON ({e})') from e
    return cls(tok, source=path, specials=specials)

  def save(self, path):
    self.tok.save(path)

  def to_json(self):
    """The tokenizer.json text (for a caller that writes it atomically)."""
    return self.tok.to_str()

  def encode(self, text):
    return self.encode_batch([text])[0]

  def encode_batch(self, texts):
    # The Rust side encodes the batch on all cores. It refuses a lone
    # surrogate with a TypeError: only then is each text made valid (a
    # corpus pass pays nothing for a command-line prompt's odd byte).
    try:
      encodings = self.tok.encode_batch(list(texts), add_special_tokens=False)
    except TypeError:
      encodings = self.tok.encode_batch([_valid(t) for t in texts], add_special_tokens=False)
    return [np.asarray(e.ids, np.int32) for e in encodings]

  def decode(self, ids):
    return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)


def _valid(text):
  """`text` with each undecodable byte of a command-line argument (a lone
  surrogate, PEP 383) as U+FFFD, which a BPE vocabulary can encode."""
  return text.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')


def token_content(token):
  """A special token as tokenizer_config.json writes it: a string, or a dict with 'content'."""
  return token.get('content') if isinstance(token, dict) else token


def train_bpe(texts, vocab_size):
  """Byte-level BPE trained on `texts`: ids 0..2 special, then the 256 byte
  symbols, then merges up to `vocab_size` (fewer if the text runs out of pairs)."""
  min_size = len(SPECIALS) + 256 + 1
  if vocab_size < min_size:
    raise ConfigError(f'data.bpe_vocab_size={vocab_size} must be at least {min_size} '
                      '(3 special ids + 256 bytes + 1 merge)')
  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(texts, trainer=trainer)
  return BpeTokenizer(tok, source='the trained BPE')
