"""Regenerates tests/interop/fixtures/: the one script of the suite that needs torch.

  python -m tests.interop.make_fixtures [NAME ...]

With names, only those fixtures are (re)made and the others stay as they are.

Every fixture is a transformers checkpoint directory (config.json,
*.safetensors, the shared tiny tokenizer) plus `reference.npz`: fixed tokens
and the float32 logits transformers computes for them. Two kinds:

* built by transformers (random weights, redrawn at O(1) scale so a wrong
  transpose or a missing norm moves the logits by O(1), not 1e-3):
  llama_tied_mha (Llama 3 RoPE scaling), llama_gqa_sharded (float32, sharded
  with an index), qwen2_bias, qwen3_qk_norm, mixtral (8 experts, top-2),
  qwen3_moe_norm (norm_topk_prob true), qwen3_moe_interleaved (false, first
  layer dense), qwen2_moe_shared (q/k/v biases, a shared expert of two
  expert widths and its sigmoid gate); the others are stored in bfloat16.
* built by moe_jax and written by our exporter: export_dense (a SmolLM2-style
  tied GQA decoder), export_mixtral_upcycled (that model after dense_to_moe,
  4 experts top-2, exported as Mixtral), export_qwen3_moe (qk-norm, a dense
  first layer, gates not renormalised), export_qwen2_moe_upcycled (a Qwen2-style
  dense model after finegrained: 2 copies x granularity 2, top-2 of 4, a
  shared expert with its gate, exported as Qwen2-MoE; its reference.npz also
  holds `dense_logits`, our dense model's on the same tokens).

It prints max |moe_jax - transformers| per fixture: import parity for all,
and for the exported ones also our model before export against
transformers on the exported files.
"""
import json
import os
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers
import torch
import transformers

from configs import common
from configs.upcycle import dense_to_moe, finegrained
from moe_jax import sharding
from moe_jax.data import corpus
from moe_jax.data.tokenizer import BpeTokenizer
from moe_jax.interop import archs, exporter, importer
from moe_jax.models import config as model_config, transformer
from moe_jax.upcycle import recipes, transition

HERE = os.path.join(os.path.dirname(__file__), 'fixtures')
VOCAB = 280
SHAPE = dict(vocab_size=VOCAB, hidden_size=8, intermediate_size=12, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=4)
TOKENS_SHAPE = (1, 8)
SPECIALS = dict(bos_token='<|im_start|>', eos_token='<|im_end|>', pad_token='<|im_end|>',
                add_bos_token=False,
                chat_template="{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                              "{{ m['content'] }}<|im_end|>\n{% endfor %}")

HF_BORN = {
    'llama_tied_mha': (transformers.LlamaConfig, dict(
        SHAPE, num_key_value_heads=4, head_dim=8, tie_word_embeddings=True, rms_norm_eps=1e-5,
        rope_parameters=dict(rope_type='llama3', rope_theta=500_000.0, factor=4.0,
                             low_freq_factor=1.0, high_freq_factor=32.0,
                             original_max_position_embeddings=256))),
    'llama_gqa_sharded': (transformers.LlamaConfig, dict(
        SHAPE, rope_parameters=dict(rope_type='default', rope_theta=10_000.0))),
    'qwen2_bias': (transformers.Qwen2Config, dict(SHAPE, num_attention_heads=2,
                                                  num_key_value_heads=1)),
    'qwen3_qk_norm': (transformers.Qwen3Config, dict(SHAPE, tie_word_embeddings=True)),
    'mixtral': (transformers.MixtralConfig, dict(
        SHAPE, intermediate_size=6, num_local_experts=8, num_experts_per_tok=2)),
    'qwen3_moe_norm': (transformers.Qwen3MoeConfig, dict(
        SHAPE, moe_intermediate_size=6, num_experts=4, num_experts_per_tok=2,
        norm_topk_prob=True)),
    'qwen3_moe_interleaved': (transformers.Qwen3MoeConfig, dict(
        SHAPE, num_hidden_layers=3, moe_intermediate_size=6, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[0])),
    'qwen2_moe_shared': (transformers.Qwen2MoeConfig, dict(
        SHAPE, moe_intermediate_size=6, shared_expert_intermediate_size=12, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=False)),
}
FLOAT32 = ('llama_gqa_sharded',)
# transformers' loop over experts: its grouped-matmul path wants 16-byte strides.
EAGER = dict(experts_implementation='eager', attn_implementation='eager')


def train_tokenizer(directory):
  """A 280-token byte-level BPE shaped like SmolLM2's (digits split, ChatML specials)."""
  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Digits(individual_digits=True),
      pre_tokenizers.ByteLevel(add_prefix_space=False)])
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=VOCAB, special_tokens=['<|endoftext|>', '<|im_start|>', '<|im_end|>'],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
  tok.train_from_iterator([d.text for d in corpus.shakespeare()[:4]], trainer=trainer)
  assert tok.get_vocab_size() == VOCAB
  os.makedirs(directory, exist_ok=True)
  tok.save(os.path.join(directory, 'tokenizer.json'))
  with open(os.path.join(directory, 'tokenizer_config.json'), 'w') as f:
    json.dump(SPECIALS, f, indent=2)


def randomize(model, seed):
  """Weights at O(1) scale: linears N(0, 1/fan_in), norms 1 + N(0, 0.2^2), biases N(0, 0.2^2)."""
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=gen)
      if name.endswith('norm.weight'):
        p.copy_(1 + 0.2 * noise)
      elif name.endswith('.bias'):
        p.copy_(0.2 * noise)
      else:
        p.copy_(noise * p.shape[-1] ** -0.5)


def reference(directory, model, seed):
  tokens = np.random.default_rng(seed).integers(0, VOCAB, TOKENS_SHAPE).astype(np.int32)
  with torch.no_grad():
    logits = model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()
  np.savez(os.path.join(directory, 'reference.npz'), tokens=tokens, logits=logits)
  return tokens, logits


def copy_tokenizer(directory):
  for name in ('tokenizer.json', 'tokenizer_config.json'):
    shutil.copy(os.path.join(HERE, 'tokenizer', name), directory)


def load_hf(directory):
  return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                           **EAGER).eval()


def our_logits(config, params, tokens):
  model = transformer.Transformer(model_config.from_config(config))
  return np.asarray(model.apply({'params': params}, jnp.asarray(tokens))[0])


def import_diff(directory):
  ref = np.load(os.path.join(directory, 'reference.npz'))
  config, params, *_ = importer.convert(directory, common.base())
  return float(np.max(np.abs(our_logits(config, params, ref['tokens']) - ref['logits'])))


def make_hf_born(name, seed):
  config_cls, kwargs = HF_BORN[name]
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(config_cls(**kwargs), dtype=torch.float32,
                                                        **EAGER)
  randomize(model, seed)
  directory = os.path.join(HERE, name)
  if name in FLOAT32:
    model.save_pretrained(directory, max_shard_size='4KB')
  else:
    model.to(torch.bfloat16).save_pretrained(directory)
  copy_tokenizer(directory)
  # From the files: what a transformers user of the checkpoint computes.
  reference(directory, load_hf(directory), seed)


def moe_jax_config(**model):
  config = common.base()
  config.seq_len = 16
  config.model.update(dict(dict(vocab_size=VOCAB, d_model=8, num_layers=2, num_heads=4,
                                num_kv_heads=2, head_dim=4, d_ff=12), **model))
  return config


def random_params(config, seed):
  cfg = model_config.from_config(config)
  params = transformer.Transformer(cfg).init(jax.random.key(seed),
                                             jnp.zeros((1, 4), jnp.int32))['params']
  rng = np.random.default_rng(seed)

  def fan_in(path, shape):
    if path.endswith('attn/o'):
      return shape[0] * shape[1]
    return shape[1] if '/experts/' in path or path == 'embed/embedding' else shape[0]

  def redraw(key_path, w):
    path = sharding.path_str(key_path)
    noise = rng.standard_normal(w.shape).astype(np.float32)
    if path.endswith('scale'):
      return 1 + 0.2 * noise
    if path.endswith('bias'):
      return 0.2 * noise
    return noise * fan_in(path, w.shape) ** -0.5
  return jax.tree_util.tree_map_with_path(redraw, params)


def export(name, config, params, seed):
  """Our exporter's files for (config, params), then transformers' logits on them."""
  directory = os.path.join(HERE, name)
  shutil.rmtree(directory, ignore_errors=True)
  os.makedirs(directory)
  tok = BpeTokenizer.load(os.path.join(HERE, 'tokenizer', 'tokenizer.json'))
  exporter.hf_files(config, params, archs.pick(config), tok).write(directory)
  tokens, logits = reference(directory, load_hf(directory), seed)
  return float(np.max(np.abs(our_logits(config, params, tokens) - logits)))


def main(names=()):
  make = lambda name: not names or name in names
  if not names:
    shutil.rmtree(HERE, ignore_errors=True)
    train_tokenizer(os.path.join(HERE, 'tokenizer'))
  for seed, name in enumerate(HF_BORN):
    if make(name):
      make_hf_born(name, seed)
      print(f'{name:26s} import  max|dlogits| {import_diff(os.path.join(HERE, name)):.2e}')

  dense = moe_jax_config(tie_embeddings=True, rope_theta=100_000.0, norm_eps=1e-5)
  dense_params = random_params(dense, 10)
  diffs = {}
  if make('export_dense'):
    diffs['export_dense'] = export('export_dense', dense, dense_params, 10)
  if make('export_mixtral_upcycled'):
    up = dense.copy_and_resolve_references()
    up.upcycle = dense_to_moe.get_config('experts=4,top_k=2,bias=False')
    moe = transition.target_config(up)
    moe_params = transition.grow(up, moe, [recipes.Input(up, dense_params)]).params
    diffs['export_mixtral_upcycled'] = export('export_mixtral_upcycled', moe, moe_params, 10)
  if make('export_qwen3_moe'):
    qwen = moe_jax_config(num_layers=3, qk_norm=True)
    qwen.moe.update(num_experts=4, top_k=2, d_ff=6, first_dense=1, renormalize=False)
    diffs['export_qwen3_moe'] = export('export_qwen3_moe', qwen, random_params(qwen, 11), 11)
  if make('export_qwen2_moe_upcycled'):
    name = 'export_qwen2_moe_upcycled'
    qwen2 = moe_jax_config(qkv_bias=True)
    qwen2_params = random_params(qwen2, 12)
    qwen2.upcycle = finegrained.get_config(
        'experts=2,top_k=1,granularity=2,shared,shared_gate,bias=False')
    fine = transition.target_config(qwen2)
    fine_params = transition.grow(qwen2, fine, [recipes.Input(qwen2, qwen2_params)]).params
    diffs[name] = export(name, fine, fine_params, 12)
    ref = dict(np.load(os.path.join(HERE, name, 'reference.npz')))
    ref['dense_logits'] = our_logits(qwen2, qwen2_params, ref['tokens'])
    np.savez(os.path.join(HERE, name, 'reference.npz'), **ref)
    print(f'transformers: upcycled Qwen2-MoE vs our dense model max|dlogits| '
          f'{np.max(np.abs(ref["logits"] - ref["dense_logits"])):.2e}')
  for name, diff in diffs.items():
    print(f'{name:26s} export  max|dlogits| {diff:.2e}   '
          f'import max|dlogits| {import_diff(os.path.join(HERE, name)):.2e}')
  if make('export_dense') or make('export_mixtral_upcycled'):
    dense_ref = np.load(os.path.join(HERE, 'export_dense', 'reference.npz'))['logits']
    moe_ref = np.load(os.path.join(HERE, 'export_mixtral_upcycled', 'reference.npz'))['logits']
    print(f'transformers: upcycled Mixtral vs dense Llama max|dlogits| '
          f'{np.max(np.abs(moe_ref - dense_ref)):.2e}')
  total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(HERE) for f in fs)
  print(f'fixtures: {total / 1024:.0f} KiB')


if __name__ == '__main__':
  main(sys.argv[1:])
