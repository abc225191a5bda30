"""The MoE layer benchmark's correctness check: every timed Pallas path's
output and gradients against the `ragged` path's (jax.lax.ragged_dot), as a
relative L2 error per tensor, so a fast path that is wrong is reported as
such beside its time (experiments/bench/moe_layer.py).
"""
import jax.numpy as jnp


# bf16 inputs, f32 accumulation in both paths: what the issue allows in bf16.
RTOL = 2e-2


def rel_err(a, b):
  a, b = (jnp.asarray(v, jnp.float32) for v in (a, b))
  return float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-30))


# Tokens per call of the ragged reference: jax.lax.ragged_dot lowers densely
# on GPU (every expert's output for every row), which at T = 4096, E = 64,
# F = 4096 asked for 72 GiB in one allocation on an 80 GB H100.
CHUNK = 1024


def _reference(fwd, fwd_bwd, args, ct):
  """ragged's output and gradients, CHUNK tokens at a time. The loss is
  a sum over tokens, so the weight gradients are sums over chunks (in f32)."""
  x, idx, gates, *ws = args
  ys, gxs, ggs, gws = [], [], [], None
  for s in range(0, x.shape[0], CHUNK):
    part = (x[s:s + CHUNK], idx[s:s + CHUNK],
            gates[s:s + CHUNK], *ws)
    ys.append(fwd['ragged'](*part))
    gx, gg, *gw = fwd_bwd['ragged'](ct[s:s + CHUNK], *part)
    gxs.append(gx)
    ggs.append(gg)
    gw = [g.astype(jnp.float32) for g in gw]
    gws = gw if gws is None else [a + g for a, g in zip(gws, gw)]
  return jnp.concatenate(ys), [jnp.concatenate(gxs), jnp.concatenate(ggs),
                               *gws]


def _check(fwd, fwd_bwd, args, ct, want, path):
  """Relative L2 error of a Pallas path's output and gradients against
  ragged's (want)."""
  want_y, want_grads = want
  errs = {'y': rel_err(fwd[path](*args), want_y)}
  names = ('x', 'gates', 'wi_0', 'wi_1', 'wo')
  for name, got, w in zip(names, fwd_bwd[path](ct, *args), want_grads):
    errs[name] = rel_err(got, w)
  return dict(rel_err=errs, rtol=RTOL,
              ok=all(v <= RTOL for v in errs.values()))


def checks(fwd, fwd_bwd, args, ct, paths):
  """_check of each Pallas path against one computation of the reference; a
  path that fails to run (or the reference) is ok=False with its error."""
  def failed(err):
    return dict(ok=False, error=f'{type(err).__name__}: {str(err)[:200]}')
  try:
    want = _reference(fwd, fwd_bwd, args, ct)
  except Exception as err:  # pylint: disable=broad-except
    return {path: failed(err) for path in paths}
  out = {}
  for path in paths:
    try:
      out[path] = _check(fwd, fwd_bwd, args, ct, want, path)
    except Exception as err:  # pylint: disable=broad-except
      out[path] = failed(err)
  return out
