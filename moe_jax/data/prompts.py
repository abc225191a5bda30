"""How a question is asked and answered in chat: one format for the fine-tuning
mixture (moe_jax/data/sft_mix.py) and the generate-mode benchmarks
(moe_jax/eval/tasks.py), so fine-tuning teaches the answer format the
benchmark reads back.

A multiple-choice question is the user turn

  {stem}
  A. {choice 0}
  B. {choice 1}
  ...
  Answer with the letter of the correct choice.

and its answer is `{letter}. {choice}` (or another of ANSWER_FORMS). A math
question (GSM8K, MATH) is the problem with "Give the final answer after 'The
answer is'." for GSM8K, or "Put the final answer in \\boxed{}." for MATH.
"""
import re

LETTERS = 'ABCDEFGHIJ'
MC_INSTRUCTION = 'Answer with the letter of the correct choice.'
NUMBER_INSTRUCTION = "Solve the problem step by step, then give the final number after 'The answer is'."
BOXED_INSTRUCTION = 'Solve the problem, then put the final answer in \\boxed{}.'

# OLMES queries wrap the question: "Question: ...\nAnswer:", "Goal: ...\nAnswer:".
_WRAPPER = re.compile(r'^(?:Question|Goal):\s*(.*?)\s*\nAnswer:\s*$', re.DOTALL)
_CONTINUE = 'Which ending continues the text best?'


def stem(query, continuation=False):
  """The question inside an OLMES `query`. `continuation`: the query is the
  start of a text the choices complete (HellaSwag), which is said so."""
  if continuation:
    return f'{_CONTINUE}\n{query.strip()}'
  match = _WRAPPER.match(query)
  return match.group(1) if match else query.strip()


def multiple_choice(stem_text, choices):
  if len(choices) > len(LETTERS):
    raise ValueError(f'{len(choices)} choices; at most {len(LETTERS)} have letters')
  options = '\n'.join(f'{LETTERS[i]}. {c.strip()}' for i, c in enumerate(choices))
  return f'{stem_text}\n{options}\n{MC_INSTRUCTION}'


ANSWER_FORMS = ('letter_choice', 'letter', 'choice_letter')


def multiple_choice_answer(choices, gold, form='letter_choice'):
  """The assistant turn of a multiple-choice question, in one of three forms:

  letter_choice  `B. {choice}`: the letter decides, first (the default)
  letter         `B`: the letter is the whole response, so the response-token
                 loss is the letter's, not a thirtieth of a response whose
                 other tokens are copied from the prompt
  choice_letter  `{choice}\nThe answer is B.`: the choice's text first, then
                 its letter; the decision is made while writing the text
                 (what loglik scoring measures), and the letter is looked up
                 in the prompt beside the text just written
  """
  if form not in ANSWER_FORMS:
    raise ValueError(f'answer form {form!r} is not one of {", ".join(ANSWER_FORMS)}')
  letter, choice = LETTERS[gold], choices[gold].strip()
  return {'letter_choice': f'{letter}. {choice}', 'letter': letter,
          'choice_letter': f'{choice}\nThe answer is {letter}.'}[form]


def number_problem(question):
  return f'{question.strip()}\n{NUMBER_INSTRUCTION}'


def boxed_problem(problem):
  return f'{problem.strip()}\n{BOXED_INSTRUCTION}'
