"""SFT records: chat rendering cut into prompt and response pieces, the loss
only on response tokens, records packed whole, the hold-out by record id, and
one-line errors naming the record."""
import json

import numpy as np
import pytest

from configs import common
from moe_jax.data import chat, packing, pipeline, sft
from moe_jax.data.tokenizer import ByteTokenizer
from moe_jax.errors import ConfigError

TOK = ByteTokenizer()
# SmolLM2-Instruct's template (its tokenizer_config.json): ChatML, a default system turn.
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are helpful<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
TALK = [dict(role='user', content='Hi'), dict(role='assistant', content='Hello!'),
        dict(role='user', content='2+2?'), dict(role='assistant', content='4')]


def test_chatml_pieces_cut_at_each_response():
  render = chat.Renderer('model', CHATML)
  pieces = render.pieces(TALK)
  assert ''.join(t for t, _ in pieces) == render.render(TALK)
  assert [t for t, r in pieces if r] == ['Hello!<|im_end|>\n', '4<|im_end|>\n']
  assert pieces[0] == ('<|im_start|>system\nYou are helpful<|im_end|>\n<|im_start|>user\nHi'
                       '<|im_end|>\n<|im_start|>assistant\n', False)
  assert render.prompt(TALK[:1]) == pieces[0][0]   # inference sees the training prompt


def test_plain_template_and_its_errors():
  render = chat.Renderer('plain')
  assert [p for p in render.pieces(TALK[:2])] == [('User: Hi\nAssistant: ', False),
                                                  ('Hello!\n', True)]
  with pytest.raises(ConfigError, match='the tokenizer has no chat_template'):
    chat.Renderer('model', None)
  with pytest.raises(ConfigError, match="data.chat_template='jinja' is not one of"):
    chat.Renderer('jinja')
  # A template that puts each turn count in front is not prefix-stable.
  with pytest.raises(ConfigError, match='cannot be cut'):
    chat.Renderer('model', '{{ messages|length }}{% for m in messages %}{{ m.content }}'
                  '{% endfor %}').pieces(TALK)


def _write(path, records):
  path.write_text(''.join((r if isinstance(r, str) else json.dumps(r)) + '\n' for r in records))
  return str(path)


@pytest.mark.parametrize('line, message', [
    ('{"prompt": "q"', ':2: not a JSON line'),
    ('{"prompt": "q"}', ':2: a record needs "messages", or "prompt" and "response"'),
    ('{"messages": [{"role": "user", "content": "q"}]}', ':2: no assistant message'),
    ('{"messages": [{"role": "bot", "content": "q"}]}', ':2: each message must be'),
    ('[1]', ':2: a record must be a JSON object'),
])
def test_bad_records_name_their_line(tmp_path, line, message):
  path = _write(tmp_path / 'a.jsonl', [dict(prompt='p', response='r'), line])
  with pytest.raises(ConfigError, match=message):
    sft.read(path)


def test_loss_only_on_responses_and_records_whole(tmp_path):
  records = [sft.Record(f'r{i}', f'f:{i}', (dict(role='user', content='q' * (i + 1)),
                                           dict(role='assistant', content='ab' * (i + 1))))
             for i in range(6)]
  rows = sft.pack(records, TOK, 'plain', seq_len=48)
  batch = packing.features(rows.tokens, rows.segment_ids, rows.positions, rows.mask)
  trained = batch['targets'][batch['loss_mask'] > 0]
  # Exactly the responses and the <eos> after each: 'ab' * (i + 1) + '\n' <eos>.
  assert len(trained) == sum(2 * (i + 1) + 2 for i in range(6))
  assert sorted(trained.tolist()) == sorted(
      sum(([*TOK.encode('ab' * (i + 1) + '\n'), TOK.eos_id] for i in range(6)), []))
  # Each record lies whole in one segment of one row.
  segments = {(r, s) for r in range(len(rows)) for s in set(rows.segment_ids[r]) - {0}}
  assert len(segments) == 6


def test_long_records(tmp_path):
  record = sft.Record('x', 'f.jsonl:7', (dict(role='user', content='q' * 40),
                                          dict(role='assistant', content='a' * 10)))
  with pytest.warns(UserWarning, match='1 of 1 SFT records .* lost the start of their prompt'):
    rows = sft.pack([record], TOK, 'plain', seq_len=16)
  assert rows.mask[0].sum() == 12 and rows.tokens.shape == (1, 17)
  with pytest.raises(ConfigError, match='f.jsonl:7: from its first response token on it has 12'
                                        ' tokens, more than seq_len=8'):
    sft.pack([record], TOK, 'plain', seq_len=8)


def test_pipeline_holds_out_by_id_and_resumes(tmp_path):
  # Record k appears three times (a mixture that drew it thrice).
  path = _write(tmp_path / 'mix.jsonl', [dict(id=f'k{i % 10}', prompt=f'question {i % 10}',
                                              response=f'answer {i % 10}') for i in range(30)])
  config = common.base()
  config.data.update(source='sft', patterns=path, chat_template='plain', val_fraction=0.2)
  config.update(seq_len=48, batch_size=4, eval_batches=1)
  train, val = pipeline.documents(config, 'train'), pipeline.documents(config, 'validation')
  assert len(val) == 6 and not {r.name for r in train} & {r.name for r in val}
  it = pipeline.train_iterator(config, TOK)
  first = [next(it) for _ in range(3)]
  state = it.get_state()
  after = next(it)
  again = pipeline.train_iterator(config, TOK)
  again.set_state(state)
  assert all(np.array_equal(after[k], v) for k, v in next(again).items())
  for batch in first:   # every trained target is a response byte or <eos>
    allowed = set(TOK.encode('answer 0123456789\n').tolist()) | {TOK.eos_id}
    assert set(batch['targets'][batch['loss_mask'] > 0].tolist()) <= allowed
  assert 0 < pipeline.validation_entropy(config, TOK) < 8


class _ChatByteTokenizer(ByteTokenizer):
  chat_template = CHATML


def test_with_the_chat_template_only_response_tokens_carry_loss(tmp_path):
  """Through the training pipeline, each trained segment's targets spell its
  response exactly (the letter first, through <|im_end|>\\n): a mask shifted by
  one token, or one that kept any prompt token (the system turn, the question,
  '<|im_start|>assistant\\n'), fails."""
  tok = _ChatByteTokenizer()
  answers = {f'k{i}': f'{"ABCD"[i % 4]}. choice {i}' for i in range(12)}
  path = _write(tmp_path / 'mix.jsonl', [
      dict(id=k, prompt=f'question {k}?\nA. x\nB. y\nAnswer with the letter.', response=v)
      for k, v in answers.items()])
  config = common.base()
  config.data.update(source='sft', patterns=path, chat_template='model', val_fraction=0.1)
  config.update(seq_len=256, batch_size=2, eval_batches=1)
  it = pipeline.train_iterator(config, tok)
  seen = set()
  for _ in range(6):
    batch = next(it)
    for row in range(len(batch['targets'])):
      for seg in set(batch['segment_ids'][row].tolist()) - {0}:
        where = (batch['segment_ids'][row] == seg) & (batch['loss_mask'][row] > 0)
        trained = tok.decode(batch['targets'][row][where])
        assert trained.endswith('<|im_end|>\n') and trained[:-len('<|im_end|>\n')] in set(
            answers.values()), trained
        seen.add(trained)
  assert len(seen) > 4
