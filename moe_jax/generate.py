r"""Continue prompts with a checkpoint's model: greedy, or sampled.

  python -m moe_jax.generate --ckpt=CKPT --prompt='To be, or not' [--prompt=...] \
      [--max_new_tokens=64] [--temperature=0] [--top_k=0] [--top_p=1] [--seed=0] [--chat]

CKPT is a workdir (its newest checkpoint) or one step directory. Prompts are
encoded with the workdir's tokenizer (with its BOS when it adds one) and
decoded together in one batch with a KV cache (moe_jax/eval/generation.py).
`--chat` sends each prompt as one user turn in the workdir's chat template
(the tokenizer's own, or the plain `User: ... Assistant: ` one of a model
fine-tuned with data.chat_template=plain), as `evaluate --tasks` does.
`--temperature` > 0 samples, from the `--top_k` likeliest tokens (0: all) and
the `--top_p` nucleus (1: all). A continuation stops at the end-of-text token
(and with --chat at the template's end-of-turn token) or after
--max_new_tokens. Prints one JSON line per prompt: prompt, completion (text)
and tokens (the new ids).
"""
import json

from absl import flags
import jax

from moe_jax import cli
from moe_jax.eval import generation, harness, restore



def continuations(ckpt, prompts, max_new_tokens, temperature, seed, top_k=0, top_p=1.0,
                  chat=False):
  loaded = restore.load(ckpt)
  tok = loaded.tokenizer
  head = [] if tok.bos_id is None else [tok.bos_id]
  stops = tok.eos_id
  texts = prompts
  if chat:
    render = harness.renderer(loaded)
    texts = [render.prompt([dict(role='user', content=p)]) for p in prompts]
    stops = harness.stop_ids(tok, render)
  new = generation.generate(loaded.model, loaded.params,
                            [head + [int(i) for i in tok.encode(t)] for t in texts],
                            max_new_tokens, temperature, stops, jax.random.key(seed),
                            tok.pad_id, context=(loaded.config.model.max_position_embeddings or
                                                 loaded.config.seq_len),
                            top_k=top_k, top_p=top_p)
  return [dict(prompt=p, completion=tok.decode(ids), tokens=ids) for p, ids in zip(prompts, new)]


def define_flags():
  """The command line; defined only when run as a program, so tests import
  this module beside other entry points without clashing flags."""
  flags.DEFINE_string('ckpt', None, 'Workdir or checkpoint step directory.')
  flags.DEFINE_multi_string('prompt', None, 'A prompt (repeat the flag for a batch).')
  flags.DEFINE_integer('max_new_tokens', 64, 'New tokens per prompt, at most.')
  flags.DEFINE_float('temperature', 0.0, '0: greedy; > 0: sample.')
  flags.DEFINE_integer('top_k', 0, 'Sample from the k likeliest tokens only (0: all).')
  flags.DEFINE_float('top_p', 1.0, 'Sample from the smallest set of tokens whose '
                     'probability reaches p (1: all).')
  flags.DEFINE_integer('seed', 0, 'Sampling seed.')
  flags.DEFINE_bool('chat', False, "Each prompt is a user turn in the workdir's chat "
                    'template; stop at its end-of-turn token.')
  flags.mark_flags_as_required(['ckpt', 'prompt'])


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  for line in cli.run_reporting_errors(continuations, f.ckpt, f.prompt, f.max_new_tokens,
                                       f.temperature, f.seed, f.top_k, f.top_p, f.chat):
    print(json.dumps(line))


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
