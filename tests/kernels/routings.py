"""Routing fixtures for the kernel tests: idx_Tk (distinct experts per token)
and normalised gates for the load patterns that break dispatch code."""
import numpy as np

ROUTINGS = ('uniform', 'skewed', 'all_to_one', 'empty_experts')


def make_idx(routing, num_tokens, num_experts, top_k, seed=0):
  rng = np.random.default_rng(seed)
  if routing == 'uniform':
    p = np.full(num_experts, 1.0 / num_experts)
  elif routing == 'skewed':      # Zipf-like: expert e gets ~1/(e+1)^2
    p = 1.0 / np.arange(1, num_experts + 1) ** 2
  elif routing == 'all_to_one':  # every token picks experts 0..k-1
    return np.tile(np.arange(top_k, dtype=np.int32), (num_tokens, 1))
  elif routing == 'empty_experts':  # the upper half of the experts gets nothing
    p = np.where(np.arange(num_experts) < num_experts // 2, 1.0, 0.0)
  else:
    raise ValueError(routing)
  p = p / p.sum()
  return np.stack([rng.choice(num_experts, top_k, replace=False, p=p)
                   for _ in range(num_tokens)]).astype(np.int32)


def make_gates(num_tokens, top_k, seed=0):
  logits = np.random.default_rng(seed + 1).normal(size=(num_tokens, top_k))
  e = np.exp(logits - logits.max(axis=1, keepdims=True))
  return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
