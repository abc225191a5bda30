"""Numpy model of the capacity drop rule, shared by the expert-parallel and
sharded-dispatch tests so that each compares against it, not against the other."""
import numpy as np


def kept_by_capacity(idx_Tk, gates_Tk, capacity, shards, num_experts):
  """[T, k] bool: which assignments survive. Tokens are split into `shards`
  equal contiguous blocks (the last one short); within each block an expert
  takes at most `capacity` assignments, first choices of every token before
  any second choice, in token order; zero gates are never routed."""
  idx_Tk, routed_Tk = np.asarray(idx_Tk), np.asarray(gates_Tk) != 0
  tokens, top_k = idx_Tk.shape
  per_shard = -(-tokens // shards)
  keep_Tk = np.zeros(idx_Tk.shape, bool)
  for start in range(0, tokens, per_shard):
    used_E = np.zeros(num_experts, int)
    for j in range(top_k):
      for t in range(start, min(start + per_shard, tokens)):
        if routed_Tk[t, j] and used_E[idx_Tk[t, j]] < capacity:
          used_E[idx_Tk[t, j]] += 1
          keep_Tk[t, j] = True
  return keep_Tk
