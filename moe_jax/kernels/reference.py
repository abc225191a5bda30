"""Loop-over-experts MoE FFN: the slow, obviously-correct reference.

Every dispatch path (einsum, ragged, pallas, expert-parallel) is tested against
`moe_ffn`. It runs each expert densely on every token and keeps only the
routed ones, so it costs E times the FLOPs of a real dispatch: tests only.

Contract shared by all dispatch paths:
  x_TD      tokens, flattened over batch and length
  idx_Tk    int32 expert index of each token's k choices (may repeat experts
            across tokens; never within a token)
  gates_Tk  combine weights (already normalised as the router decided)
  wi_0_EDF, wi_1_EDF, wo_EFD   stacked SwiGLU expert weights
returns y_TD = sum_k gates[t, k] * FFN_{idx[t, k]}(x[t]).
"""
import jax
import jax.numpy as jnp


def swiglu(x_TD, wi_0_DF, wi_1_DF, wo_FD):
  h_TF = jax.nn.silu(x_TD @ wi_0_DF) * (x_TD @ wi_1_DF)
  return h_TF @ wo_FD


def moe_ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD):
  num_experts = wi_0_EDF.shape[0]
  y_TD = jnp.zeros(x_TD.shape, jnp.float32)
  for e in range(num_experts):
    # Gate of expert e for each token (0 where e was not chosen).
    g_T = jnp.sum(jnp.where(idx_Tk == e, gates_Tk, 0), axis=-1)
    y_e_TD = swiglu(x_TD, wi_0_EDF[e], wi_1_EDF[e], wo_EFD[e])
    y_TD = y_TD + g_T[:, None].astype(jnp.float32) * y_e_TD.astype(jnp.float32)
  return y_TD.astype(x_TD.dtype)
