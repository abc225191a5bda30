r"""What greedy decoding decides on a multiple-choice question: the answer letter.

  python -m experiments.moesturizer.letter_probe --ckpt=DIR --tasks=arc_easy --limit=100 \
      [--out=FILE]
  python -m experiments.moesturizer.letter_probe --results=docs/moesturizer/letter_probe.json

Generate mode reads the letter a model writes first; this probe scores that
one token directly. For each question it renders the generate prompt (the
checkpoint's chat template, as moe_jax/eval/harness.py does) and takes the
log-probability of each letter token as the first response token (a single
forward pass per question: moe_jax/eval/loglik.py with one-token
continuations). It prints one JSON line per task:

* `letter_loss`: mean -log p(gold letter), over the whole vocabulary: the
  SFT loss on the one response token that carries the decision (the rest of
  a response, `. {choice}<|im_end|>`, is copied from the prompt);
* `letter_loss_among`: the same, renormalised over the choices' letters
  (ln 4 = 1.386 for a model that has no preference on four choices);
* `accuracy` (argmax over the letters, with its Wilson interval) and
  `letters`: the share each letter gets as the argmax, i.e. the first token
  greedy decoding writes when it writes a letter;
* `letter_mass`: the mean probability of all letters together (whether the
  model answers in the format at all).

`from_results(path)` renders docs/moesturizer.md's probe table from a results
file {"rows": [{"model", "command", "lines": [probe lines], "train_loss":
[[step, loss], ...] (optional: metrics.jsonl's response-token loss)}]}
(experiments/check_docs.py rebuilds it).
"""
import json
import os

import numpy as np
from absl import flags

from experiments import provenance
from moe_jax import atomic, cli, containment
from moe_jax.data import prompts
from moe_jax.errors import ConfigError
from moe_jax.eval import harness, loglik, restore, tasks
from moe_jax.workdir import checkpoint


def define_flags():
  """The command line; defined only when run as a program (check_docs imports
  this module beside other entry points)."""
  flags.DEFINE_string('ckpt', None, 'A workdir or a checkpoint step directory.')
  flags.DEFINE_list('tasks', ['arc_easy'], 'Multiple-choice tasks.')
  flags.DEFINE_integer('limit', 100, 'Questions per task (a seeded subset).')
  flags.DEFINE_integer('seed', 0, 'Subset seed.')
  flags.DEFINE_string('out', None, 'Also write the lines to this file.')
  flags.DEFINE_string('results', None, 'Print the table of this results file instead.')


def letter_ids(tok, count):
  """The single token id of each of the first `count` letters (the token a
  response starts with); a letter that is not one token is an error."""
  out = []
  for letter in prompts.LETTERS[:count]:
    ids = [int(i) for i in tok.encode(letter)]
    if len(ids) != 1:
      raise ValueError(f'letter {letter!r} encodes to {len(ids)} tokens')
    out.append(ids[0])
  return out


def summarise(logprobs_QC, gold_Q, mass_Q):
  """The JSON fields above from [Q, C] letter log-probabilities (-inf past a
  question's choices), the gold indices and each question's letter mass."""
  logprobs_QC = np.asarray(logprobs_QC, np.float64)
  gold_Q = np.asarray(gold_Q)
  rows = np.arange(len(gold_Q))
  among_QC = logprobs_QC - np.logaddexp.reduce(logprobs_QC, axis=1, keepdims=True)
  pick_Q = np.argmax(logprobs_QC, axis=1)
  right = pick_Q == gold_Q
  counts = np.bincount(pick_Q, minlength=logprobs_QC.shape[1])
  lo, hi = harness.wilson(int(right.sum()), len(right))
  return dict(n=len(gold_Q), letter_loss=float(-logprobs_QC[rows, gold_Q].mean()),
              letter_loss_among=float(-among_QC[rows, gold_Q].mean()),
              accuracy=float(right.mean()), ci95=[lo, hi],
              letters={prompts.LETTERS[i]: int(c) for i, c in enumerate(counts) if c},
              gold_letters={prompts.LETTERS[i]: int(c) for i, c in
                            enumerate(np.bincount(gold_Q, minlength=logprobs_QC.shape[1])) if c},
              letter_mass=float(np.mean(mass_Q)))


def probe(loaded, questions):
  """One summarise() dict for `questions` (multiple-choice ones only)."""
  if not questions or any(q.kind != tasks.MC for q in questions):
    raise ValueError('the letter probe needs multiple-choice questions')
  tok, render = loaded.tokenizer, harness.renderer(loaded)
  head = [] if tok.bos_id is None else [tok.bos_id]
  width = max(len(q.choices) for q in questions)
  ids = letter_ids(tok, width)
  requests = [(tuple(head + [int(t) for t in tok.encode(
      render.prompt([dict(role='user', content=q.prompt)]))]),
               tuple((i,) for i in ids[:len(q.choices)])) for q in questions]
  logprobs_QC = loglik.score(loaded.model, loaded.params, requests, pad_id=tok.pad_id)
  finite = np.where(np.isfinite(logprobs_QC), logprobs_QC, -np.inf)
  mass_Q = np.exp(finite).sum(axis=1)
  return summarise(finite, [prompts.LETTERS.index(q.answer) for q in questions], mass_Q)


def _shares(counts):
  total = sum(counts.values())
  return ' / '.join(f'{k} {100 * v / total:.0f}' for k, v in sorted(counts.items()))


def from_results(path):
  """The markdown table of a probe results file (see the module docstring)."""
  with open(path) as f:
    rows = json.load(f)['rows']
  out = ['| model | task (n) | letter accuracy, % [95 % CI] | -log p(gold letter): vocab / '
         'among letters | letters picked, % | gold letters, % | letter mass | '
         'response-token loss (first -> last step) |', '|---' * 8 + '|']
  for row in rows:
    loss = row.get('train_loss')
    curve = f'{loss[0][1]:.3f} (step {loss[0][0]}) -> {loss[-1][1]:.3f} (step {loss[-1][0]})' \
        if loss else '-'
    for r in row['lines']:
      lo, hi = r['ci95']
      out.append(f'| {row["model"]} | {r["task"]} ({r["n"]}) | {100 * r["accuracy"]:.1f} '
                 f'[{100 * lo:.1f}, {100 * hi:.1f}] | {r["letter_loss"]:.3f} / '
                 f'{r["letter_loss_among"]:.3f} | {_shares(r["letters"])} | '
                 f'{_shares(r["gold_letters"])} | {r["letter_mass"]:.2f} | {curve} |')
  return '\n'.join(out) + '\n'


def main_fn(ckpt, names, limit, seed, out):
  if not ckpt:
    raise ConfigError('--ckpt is required')
  if out:   # a new file, beside the run at most (moe_jax/containment.py)
    containment.output_file(out, '--out', beside=[
        (os.path.dirname(checkpoint.resolve(ckpt)[0]), '--ckpt', 'workdir')])
  questions = harness.questions_of(names, limit, seed)
  loaded = restore.load(ckpt)
  lines = []
  for name, qs in questions.items():
    lines.append(json.dumps(dict(task=name, mode='letter_probe', limit=limit, seed=seed,
                                 step=loaded.step, **probe(loaded, qs),
                                 provenance=provenance.record())))
    print(lines[-1], flush=True)
  if out:
    atomic.write_text(out, ''.join(line + '\n' for line in lines))


def main(argv):
  del argv
  f = flags.FLAGS
  if f.results:
    print(cli.run_reporting_errors(from_results, f.results), end='')
    return
  cli.run_reporting_errors(main_fn, f.ckpt, f.tasks, f.limit, f.seed, f.out)


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
