r"""Continue prompts with a checkpoint's model: greedy, or sampled at a temperature.

  python -m moe_jax.generate --ckpt=CKPT --prompt='To be, or not' [--prompt=...] \
      [--max_new_tokens=64] [--temperature=0] [--seed=0]

CKPT is a workdir (its newest checkpoint) or one step directory. Prompts are
encoded with the workdir's tokenizer (with its BOS when it adds one) and
decoded together in one batch with a KV cache (moe_jax/eval/generation.py);
a continuation stops at the tokenizer's EOS. Prints one JSON line per prompt:
prompt, completion (text) and tokens (the new ids).
"""
import json

from absl import app, flags
import jax

from moe_jax import cli
from moe_jax.eval import generation, restore

_CKPT = flags.DEFINE_string('ckpt', None, 'Workdir or checkpoint step directory.')
_PROMPT = flags.DEFINE_multi_string('prompt', None, 'A prompt (repeat the flag for a batch).')
_MAX_NEW = flags.DEFINE_integer('max_new_tokens', 64, 'New tokens per prompt, at most.')
_TEMPERATURE = flags.DEFINE_float('temperature', 0.0, '0: greedy; > 0: sample.')
_SEED = flags.DEFINE_integer('seed', 0, 'Sampling seed.')
flags.mark_flags_as_required(['ckpt', 'prompt'])


def continuations(ckpt, prompts, max_new_tokens, temperature, seed):
  loaded = restore.load(ckpt)
  tok = loaded.tokenizer
  head = [] if tok.bos_id is None else [tok.bos_id]
  new = generation.generate(loaded.model, loaded.params,
                            [head + [int(i) for i in tok.encode(p)] for p in prompts],
                            max_new_tokens, temperature, tok.eos_id, jax.random.key(seed),
                            tok.pad_id, context=(loaded.config.model.max_position_embeddings or
                                                 loaded.config.seq_len))
  return [dict(prompt=p, completion=tok.decode(ids), tokens=ids) for p, ids in zip(prompts, new)]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  for line in cli.run_reporting_errors(continuations, _CKPT.value, _PROMPT.value, _MAX_NEW.value,
                                       _TEMPERATURE.value, _SEED.value):
    print(json.dumps(line))


if __name__ == '__main__':
  cli.run_app(main)
