"""`python -m moe_jax.generate --chat`, --top_k/--top_p: a prompt goes in as a
user turn of the workdir's chat template, and a chat response stops at the
template's end-of-turn token as well as at end-of-text."""
import pytest

from moe_jax import generate
from moe_jax.data import chat
from moe_jax.eval import generation, harness, restore
from moe_jax.train import trainer
from tests.data.test_sft import CHATML
from tests.train import tiny


class _Tokenizer:
  """Encodes ChatML's end-of-turn as one id, like a BPE with it as a special token."""
  eos_id = 2

  def encode(self, text):
    return [99] if text == '<|im_end|>' else list(text.encode())


def test_the_stop_set_has_end_of_text_and_the_templates_end_of_turn():
  assert chat.Renderer('model', CHATML).turn_end() == '<|im_end|>'
  assert harness.stop_ids(_Tokenizer(), chat.Renderer('model', CHATML)) == [2, 99]
  # The plain template ends a response with the end-of-text id itself.
  assert chat.Renderer('plain').turn_end() == ''
  assert harness.stop_ids(_Tokenizer(), chat.Renderer('plain')) == [2]


@pytest.fixture(scope='module')
def ckpt(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('run'))
  trainer.train_and_evaluate(tiny.config(**{
      'total_steps': 1, 'eval_every_steps': 0, 'checkpoint_every_steps': 1,
      'moe.num_experts': 0}), workdir)
  return workdir


def test_chat_sends_the_prompt_as_a_user_turn(ckpt):
  got = generate.continuations(ckpt, ['Hi'], 6, 0.0, 0, chat=True)[0]
  loaded = restore.load(ckpt)
  tok = loaded.tokenizer   # bytes: no template of its own, so the plain one
  ids = [tok.bos_id] + [int(i) for i in tok.encode('User: Hi\nAssistant: ')]
  want = generation.generate(loaded.model, loaded.params, [ids], 6, eos_id=[tok.eos_id])[0]
  assert got['prompt'] == 'Hi' and got['tokens'] == want


def test_top_k_1_through_the_command_is_greedy(ckpt):
  greedy = generate.continuations(ckpt, ['To be'], 6, 0.0, 0)
  sampled = generate.continuations(ckpt, ['To be'], 6, 3.0, 7, top_k=1)
  assert sampled == greedy
