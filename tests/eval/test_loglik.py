"""The bucketed, cache-sharing choice scorer against one plain forward pass per
(context, choice), and lm-eval's tokenisation of a request."""
import numpy as np

from moe_jax.data.tokenizer import ByteTokenizer
from moe_jax.eval import loglik
from moe_jax.models import transformer
from tests.models.test_attention import _cfg, _init


def test_score_matches_one_forward_pass_per_choice():
  cfg = _cfg(vocab_size=259, qk_norm=True)
  model, params = transformer.Transformer(cfg), _init(cfg, seed=1)
  rng = np.random.default_rng(0)
  ids = lambda n: tuple(int(t) for t in rng.integers(3, 259, n))
  # Two buckets, a short last group, and requests with fewer choices than the widest.
  requests = [(ids(n), tuple(ids(k) for k in ks)) for n, ks in [
      (3, (1, 2)), (20, (4, 1, 3)), (9, (2, 2, 2)), (1, (3, 5))]]
  fast = loglik.score(model, params, requests, token_budget=64)
  slow = loglik.reference(model, params, requests)
  assert fast.shape == (4, 3) and np.isneginf(fast[0, 2]) and np.isneginf(slow[3, 2])
  # Sums of 1-5 float32 log-probs (|sum| <= 28), summed in another order:
  # observed 8.7e-8 relative (9.5e-7 absolute) on 2026-11-25, so 1e-6 relative.
  np.testing.assert_allclose(fast, slow, rtol=1e-6, atol=0)


def test_encode_moves_trailing_spaces_to_the_continuation():
  tok = ByteTokenizer()
  context, conts = loglik.encode(tok, 'Answer: ', ['yes', 'no'])
  assert context == (tok.bos_id, *tok.encode('Answer:'))
  assert conts == (tuple(tok.encode(' yes')), tuple(tok.encode(' no')))


def test_buckets_are_powers_of_two_within_the_budget():
  requests = [((1,) * n, ((2,) * k,)) for n, k in [(3, 1), (40, 2), (17, 1)]]
  shapes = [shape for shape, _ in loglik.buckets(requests, token_budget=64)]
  assert shapes == [(4, 16, 1, 16), (2, 32, 1, 16), (1, 64, 1, 16)]
