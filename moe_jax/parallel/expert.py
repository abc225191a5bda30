"""Expert-parallel MoE FFN: tokens travel to the shard owning their expert.

`moe_ffn_ep` meets the dispatch contract of moe_jax/kernels/reference.py
(`moe_ffn`) and returns `(y_TD, dropped_frac)` like every
`moe_jax.models.dispatch` path. Under `jax.shard_map` (present in jax 0.10 and
0.11 alike, so no version branch) tokens are split over every mesh axis but
`tensor`, and experts over `expert`. Each shard:

  1. lays its T_l*k assignments into a send buffer with `slots` rows per peer
     on the expert axis (n peers, E_l = E / n experts each);
  2. exchanges it with one all_to_all, so row s*slots + j of the receive
     buffer is the j-th row peer s sent;
  3. runs its E_l experts on the received rows (`local_ffn`, below);
  4. sends the results back with the same all_to_all and combines each
     token's k outputs with its gates.

Local experts. The receive buffer's empty rows carry e = E_l (no expert).
`local_ffn='ragged'` sorts the rows by local expert, runs
`jax.lax.ragged_dot` and un-sorts; on GPU XLA lowers its weight gradient
densely. `local_ffn='pallas'` (or 'pallas_mosaic_gpu') runs the grouped-matmul kernels of
moe_jax/kernels/moe_ffn.py instead (interpret mode on CPU), whose routing
treats e = E_l as "no expert" and gives those rows no row of its buffer: under
dropless routing n - 1 of every n receive rows are empty on average, and they
cost no FLOPs. `local_ffn='grouped'` does the same with the XLA loop of
moe_jax/kernels/grouped.py (the CPU path). Pallas outputs and the grouped
loop's carries do not declare how they vary over mesh axes, so those paths
run the shard_map with check_vma=False, as moe_jax/parallel/local.py does;
tests/parallel/test_expert_parallel.py checks their forward and gradients
against the reference.

Buffer size. Dropless (`capacity=None`) needs the worst case: a token picks
distinct experts, so one peer can send at most T_l*min(k, E_l) rows to one
shard, and a shard's receive buffer holds n*T_l*min(k, E_l) rows of D: n times
the T_l*k rows it receives on average under balanced routing. With a capacity
C, each shard keeps at most C assignments per expert (first choices of all its
tokens before second choices, then token order, as in Switch), so `slots` is
min(T_l*min(k, E_l), E_l*C); the rest are dropped, add nothing to y and are
counted in `dropped_frac`. The usual C is `moe_jax.models.dispatch.capacity`
of the T_l local tokens: each token shard is one GShard group. Assignments
with a zero gate (padding) are neither sent nor counted, as in `einsum`.

Exchange. The padded path moves whole buffers with `jax.lax.all_to_all` and
runs on every backend. On GPU and TPU, `jax.lax.ragged_all_to_all` moves only
the used rows of each slot block into the same layout; XLA:CPU cannot run it,
so that path is untested here (tests/parallel/test_expert.py runs it where the
backend allows). Both are linear collectives, so autodiff goes through them.
"""
import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P
import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.kernels import grouped


def moe_ffn_ep(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, *, mesh,
               expert_axis='expert', capacity=None, tensor_axis='tensor',
               exchange=None, local_ffn='ragged'):
  """Expert-parallel `reference.moe_ffn` on `mesh`; returns (y_TD, dropped_frac).

  `exchange` is 'padded' or 'ragged'; None picks 'ragged' on GPU/TPU.
  `local_ffn` (a key of `_LOCAL_FFNS`) computes each shard's local
  experts. With `tensor_axis` in the mesh and d_ff divisible by it, each
  tensor shard holds a slice of every local expert's F and the partial outputs
  are summed.
  """
  num_experts, d_ff = wi_0_EDF.shape[0], wi_0_EDF.shape[2]
  n = mesh.shape[expert_axis]
  if num_experts % n:
    raise ConfigError(f'moe.num_experts={num_experts} is not divisible by '
                      f'mesh.{expert_axis}={n}')
  if local_ffn not in _LOCAL_FFNS:
    raise ConfigError(f'local_ffn={local_ffn!r} is not one of '
                      f'{tuple(_LOCAL_FFNS)}')
  if capacity is not None and capacity < 1:
    raise ConfigError(f'expert capacity={capacity} must be at least 1')
  if exchange is None:
    exchange = 'ragged' if jax.default_backend() in ('gpu', 'tpu') else 'padded'
  token_axes = tuple(a for a in mesh.axis_names if a != tensor_axis)
  tp = mesh.shape[tensor_axis] if tensor_axis in mesh.axis_names else 1
  f_axis = tensor_axis if tp > 1 and d_ff % tp == 0 else None

  # Pad T to a multiple of the token shards; padded tokens are never sent.
  num_tokens = x_TD.shape[0]
  shards = int(np.prod([mesh.shape[a] for a in token_axes]))
  pad = -num_tokens % shards
  valid_T = jnp.arange(num_tokens + pad) < num_tokens
  x, idx, gates = (jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1))
                   for a in (x_TD, idx_Tk, gates_Tk))

  local = functools.partial(
      _local_moe, expert_axis=expert_axis, token_axes=token_axes,
      f_axis=f_axis, capacity=capacity, exchange=exchange,
      expert_ffn=_LOCAL_FFNS[local_ffn])
  tok = P(token_axes)
  y, dropped_frac = jax.shard_map(
      local, mesh=mesh,
      in_specs=(tok, tok, tok, tok, P(expert_axis, None, f_axis),
                P(expert_axis, None, f_axis), P(expert_axis, f_axis, None)),
      out_specs=(tok, P()), check_vma=local_ffn == 'ragged')(
          x, idx, gates, valid_T, wi_0_EDF, wi_1_EDF, wo_EFD)
  return y[:num_tokens], dropped_frac


def _local_moe(x_TD, idx_Tk, gates_Tk, valid_T, wi_0, wi_1, wo, *, expert_axis,
               token_axes, f_axis, capacity, exchange, expert_ffn):
  """One shard's part of `moe_ffn_ep`; shapes are per shard."""
  n = jax.lax.axis_size(expert_axis)
  local_experts = wi_0.shape[0]
  num_tokens, k = idx_Tk.shape
  # Assignments in priority order: all first choices, then all second, ...
  e_A = idx_Tk.T.reshape(-1)
  t_A = jnp.tile(jnp.arange(num_tokens), k)
  # A zero gate (the MoE block's mark for padding) is not routed, as in einsum.
  valid_A = jnp.tile(valid_T, k) & (gates_Tk.T.reshape(-1) != 0)
  keep_A = valid_A
  slots = num_tokens * min(k, local_experts)
  if capacity is not None:
    keep_A &= _rank_within(e_A, valid_A, local_experts * n) < capacity
    slots = min(slots, local_experts * capacity)
  dest_A = e_A // local_experts
  slot_A = jnp.where(keep_A, dest_A * slots + _rank_within(dest_A, keep_A, n),
                     n * slots)

  # Which assignment fills each send slot (index A: empty).
  src_S = jnp.full(n * slots + 1, e_A.shape[0]).at[slot_A].set(
      jnp.arange(e_A.shape[0]))[:-1]
  used_S = src_S < e_A.shape[0]
  x_S = jnp.where(used_S[:, None], x_TD[t_A[jnp.where(used_S, src_S, 0)]], 0)
  e_S = jnp.where(used_S, e_A[jnp.where(used_S, src_S, 0)] % local_experts,
                  local_experts)

  move = _padded if exchange == 'padded' else _ragged
  sent_n = jnp.sum(used_S.reshape(n, slots), axis=1)
  got_n = jax.lax.all_to_all(sent_n, expert_axis, 0, 0, tiled=True)
  x_R = move(x_S, sent_n, got_n, slots, expert_axis, 0)
  e_R = move(e_S, sent_n, got_n, slots, expert_axis, local_experts)
  y_R = expert_ffn(x_R, e_R, wi_0, wi_1, wo)
  if f_axis is not None:
    y_R = jax.lax.psum(y_R, f_axis)
  back_S = move(y_R, got_n, sent_n, slots, expert_axis, 0)

  y_A = jnp.where(keep_A[:, None],
                  back_S[jnp.minimum(slot_A, n * slots - 1)], 0)
  y_kTD = y_A.reshape(k, num_tokens, -1).astype(jnp.float32)
  y_TD = jnp.einsum('ktd,tk->td', y_kTD, gates_Tk.astype(jnp.float32))
  counts = jnp.stack([jnp.sum(valid_A & ~keep_A), jnp.sum(valid_A)])
  dropped, total = jax.lax.psum(counts, token_axes)
  return y_TD.astype(x_TD.dtype), dropped / jnp.maximum(total, 1)


def _rank_within(group_A, mask_A, num_groups):
  """Rank of each masked item among the masked items of its group, in order."""
  onehot = jax.nn.one_hot(group_A, num_groups, dtype=jnp.int32) * mask_A[:, None]
  return jnp.sum(jnp.cumsum(onehot, axis=0) * onehot, axis=1) - 1


def _ragged_ffn(x_RD, e_R, wi_0, wi_1, wo):
  """SwiGLU of each row through local expert e_R; rows with e_R = E_l give 0."""
  local_experts = wi_0.shape[0]
  order = jnp.argsort(e_R, stable=True)
  sizes = jnp.sum(jax.nn.one_hot(e_R, local_experts, dtype=jnp.int32), axis=0)
  x_sorted = x_RD[order]
  h = (jax.nn.silu(jax.lax.ragged_dot(x_sorted, wi_0, sizes))
       * jax.lax.ragged_dot(x_sorted, wi_1, sizes))
  y_sorted = jax.lax.ragged_dot(h, wo, sizes)
  y_RD = jnp.zeros_like(y_sorted).at[order].set(y_sorted)
  return jnp.where((e_R < local_experts)[:, None], y_RD, 0)


def _one_choice(moe_ffn, x_RD, e_R, wi_0, wi_1, wo):
  """`_ragged_ffn` by a routed-rows-only kernel (a `moe_ffn` of
  moe_jax/kernels/moe_ffn.py or grouped.py): each row is a token with one
  choice and a unit gate, and e_R = E_l is its "no expert" index, so those
  rows get no row of the kernel's buffer and no FLOPs."""
  gates_R1 = jnp.ones((e_R.shape[0], 1), x_RD.dtype)
  return moe_ffn(x_RD, e_R[:, None], gates_R1, wi_0, wi_1, wo)


def _grouped_ffn(x_RD, e_R, wi_0, wi_1, wo):
  return _one_choice(grouped.moe_ffn, x_RD, e_R, wi_0, wi_1, wo)


def _pallas_ffn(x_RD, e_R, wi_0, wi_1, wo, kernels=None):
  # Imported on use, as in moe_jax.models.dispatch.pallas: the other paths
  # never need the Pallas kernel package.
  from moe_jax.kernels import moe_ffn  # pylint: disable=g-import-not-at-top
  return _one_choice(functools.partial(moe_ffn.moe_ffn, kernels=kernels), x_RD,
                     e_R, wi_0, wi_1, wo)


_LOCAL_FFNS = {'ragged': _ragged_ffn, 'grouped': _grouped_ffn, 'pallas': _pallas_ffn,
               'pallas_mosaic_gpu': functools.partial(_pallas_ffn, kernels='mosaic_gpu')}
LOCAL_FFNS = tuple(_LOCAL_FFNS)


def _padded(buf, sent_n, got_n, slots, axis, fill):
  """Dense exchange: every slot row travels, used or not."""
  del sent_n, got_n, slots, fill  # Unused rows are already zero / E_l.
  return jax.lax.all_to_all(buf, axis, 0, 0, tiled=True)


def _ragged(buf, sent_n, got_n, slots, axis, fill):
  """Same layout as `_padded`, moving only the first sent_n[s] rows of block s.

  UNTESTED ON CPU: XLA:CPU has no ragged-all-to-all.
  """
  n = jax.lax.axis_size(axis)
  starts = (jnp.arange(n) * slots).astype(jnp.int32)
  mine = jnp.full(n, jax.lax.axis_index(axis) * slots, jnp.int32)
  return jax.lax.ragged_all_to_all(
      buf, jnp.full_like(buf, fill), starts, sent_n.astype(jnp.int32), mine,
      got_n.astype(jnp.int32), axis_name=axis)
