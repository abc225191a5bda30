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

and its answer is `{letter}. {choice}`. A math question (GSM8K, MATH) is the
problem with "Give the final answer after 'The answer is'." for GSM8K, or
"Put the final answer in \\boxed{}." for MATH.
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


def multiple_choice_answer(choices, gold):
  return f'{LETTERS[gold]}. {choices[gold].strip()}'


def number_problem(question):
  return f'{question.strip()}\n{NUMBER_INSTRUCTION}'


def boxed_problem(problem):
  return f'{problem.strip()}\n{BOXED_INSTRUCTION}'
