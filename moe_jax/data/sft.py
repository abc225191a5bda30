"""Supervised fine-tuning data: chat records -> token rows with the loss on responses.

`data.source='sft'` (moe_jax/data/sources/sft.py) reads `data.patterns`
(comma-separated globs of JSONL files). Each line is one record, either

  {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}
  {"prompt": "...", "response": "..."}        (one user turn, one assistant turn)

with an optional "id". A record is rendered with `data.chat_template`
(moe_jax/data/chat.py), tokenised piece by piece (the prompt exactly as the
model sees it at inference), and its tokens are marked response or not: the
loss is taken only where the target is a response token (the end-of-turn
token included, so the model learns to stop).

Records are packed whole, best-fit decreasing, several to a row (segments
never attend to each other). A record longer than a row loses prompt tokens
from its start; one whose responses alone (from the first response token on)
do not fit in `seq_len` tokens is an error naming it.

The validation hold-out is `data.val_fraction` of the records, chosen by a
hash of (`data.split_seed`, the record's name): its "id", else FILE:LINE.
Records that share an id (a mixture that drew one example twice) stay on one
side of the split, so no validation response is also trained on. Exact resume
works as for text: the rows are built once and the batch of step s is a pure
function of (seed, s).
"""
import dataclasses
import warnings

import numpy as np

from moe_jax.data import chat, packing, readers
from moe_jax.errors import ConfigError

@dataclasses.dataclass(frozen=True)
class Record:
  name: str          # the split's identity: the record's "id", else FILE:LINE
  where: str         # FILE:LINE, for errors
  messages: tuple    # ({'role', 'content'}, ...)

  @property
  def text(self):
    """The contents, for training a BPE on the records."""
    return '\n'.join(m['content'] for m in self.messages)


def _messages(record, where):
  if not isinstance(record, dict):
    raise ConfigError(f'{where}: a record must be a JSON object')
  if 'messages' in record:
    messages = record['messages']
  elif isinstance(record.get('prompt'), str) and isinstance(record.get('response'), str):
    messages = [dict(role='user', content=record['prompt']),
                dict(role='assistant', content=record['response'])]
  else:
    raise ConfigError(f'{where}: a record needs "messages", or "prompt" and "response" strings')
  chat.check_messages(messages, where)
  return tuple(dict(role=m['role'], content=m['content']) for m in messages)


def read(path):
  """The records of one JSONL file (blank lines skipped)."""
  records = []
  with open(path, 'rb') as f:
    for where, record in readers.json_lines(path, f):
      messages = _messages(record, where)
      name = record.get('id')
      records.append(Record(str(name) if name is not None else where, where, messages))
  return records


def load(patterns):
  """The records of every file matched by the comma-separated globs `patterns`."""
  records = [r for path in readers.files(patterns, 'data.patterns',
                                         'data.source=sft needs JSONL files')
             for r in read(path)]
  if not records:
    raise ConfigError(f'data.patterns={patterns!r}: the files hold no records')
  return records


def renderer(kind, tok):
  return chat.Renderer(kind, getattr(tok, 'chat_template', None), getattr(tok, 'specials', None))


def encode(records, tok, render):
  """[(tokens int32 [n], response bool [n])] per record: <bos> if the
  tokenizer adds one, then each rendered piece, with <eos> after each response
  when the template does not write its own end of turn."""
  pieces = [render.pieces(list(r.messages)) for r in records]
  ids = iter(tok.encode_batch([text for p in pieces for text, _ in p]))
  out = []
  for record_pieces in pieces:
    tokens = [] if tok.bos_id is None else [tok.bos_id]
    response = [False] * len(tokens)
    for _, is_response in record_pieces:
      t = list(next(ids))
      if is_response and render.eos_after_response:
        t.append(tok.eos_id)
      tokens += t
      response += [is_response] * len(t)
    out.append((np.asarray(tokens, np.int32), np.asarray(response, bool)))
  return out


def fit(records, encoded, seq_len):
  """Each record cut to a row of seq_len + 1 tokens from the left; a record
  whose responses do not fit is an error."""
  row, out, cut = seq_len + 1, [], 0
  for record, (tokens, response) in zip(records, encoded):
    if not response.any():
      raise ConfigError(f'{record.where}: its responses render to no tokens')
    first = int(np.argmax(response))
    if len(tokens) - first > seq_len:
      raise ConfigError(f'{record.where}: from its first response token on it has '
                        f'{len(tokens) - first} tokens, more than seq_len={seq_len}')
    if len(tokens) > row:
      cut += 1
      tokens, response = tokens[-row:], response[-row:]
    out.append((tokens, response))
  if cut:
    warnings.warn(f'{cut} of {len(records)} SFT records were longer than seq_len + 1 = {row} '
                  'tokens and lost the start of their prompt')
  return out


def pack(records, tok, kind, seq_len):
  """Rows of seq_len + 1 tokens, with `mask` True on response tokens."""
  render = renderer(kind, tok)
  fitted = fit(records, encode(records, tok, render), seq_len)
  return packing.pack_whole([t for t, _ in fitted], [m for _, m in fitted], seq_len, tok.pad_id)
