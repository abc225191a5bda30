"""The memory-saving paths of the train step against the plain one: remat
policies, the chunked LM head + loss, gradient accumulation and a bf16 first
moment each give the same step (float32 round-off; bf16 within its precision)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from moe_jax.models import config as model_config
from moe_jax.models import stacking, transformer
from moe_jax.train import accumulate, optimizer, phases as phases_lib, program as program_lib
from moe_jax.train import state as state_lib, step
from moe_jax.workdir import placement
from tests.train import tiny


def _batch(batch_size, seq_len, vocab, seed=0):
  """Packed rows with padding: two documents a row, a padded tail, an all-pad row."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab, size=(batch_size, seq_len + 1))
  seg = np.ones((batch_size, seq_len), np.int32)
  cut = seq_len // 3
  seg[:, cut:] = 2
  pos = np.concatenate([np.arange(cut), np.arange(seq_len - cut)])[None].repeat(batch_size, 0)
  seg[1::3, seq_len - 5:] = 0
  seg[2] = 0
  mask = (seg != 0).astype(np.int32)
  mask[:, 0] = 0
  return dict(inputs=jnp.asarray(tokens[:, :-1], jnp.int32),
              targets=jnp.asarray(tokens[:, 1:], jnp.int32),
              segment_ids=jnp.asarray(seg), positions=jnp.asarray(pos, jnp.int32),
              loss_mask=jnp.asarray(mask))


def _config(**overrides):
  c = tiny.config(**overrides)
  c.model.vocab_size = 61
  return c


def _step(config, mesh=None):
  """(new state, metrics) of one step from a fixed init on a fixed batch. The
  step runs on the train layout (scan columns stacked under scan_layers,
  models/stacking.py); the state comes back in the `layers_{i}` one."""
  cfg = model_config.from_config(config)
  model = transformer.Transformer(cfg)
  params = stacking.stack(
      model.init(jax.random.key(0), jnp.zeros((1, config.seq_len), jnp.int32))['params'], cfg)
  phases = phases_lib.build(config)
  tx, lr_fn = optimizer.make(config.opt, config.total_steps, params, 0,
                             phases.lr_scale if phases else None)
  state = state_lib.create(params, tx, step=3)
  fn = jax.jit(functools.partial(
      step.train_step, model=model, tx=tx, lr_fn=lr_fn, seed=config.seed,
      bias_update_rate=config.moe.bias_update_rate if config.moe.use_bias else 0.0,
      phases=phases, grad_accum_steps=config.grad_accum_steps))
  batch = _batch(config.batch_size, config.seq_len, 61)
  if mesh is not None:
    sharding = placement.batch_sharding(mesh, config.mesh, config.batch_size)
    batch = jax.device_put(batch, sharding)
    fn = placement.on_mesh(mesh, fn)
  new, metrics = fn(state, batch)
  unstack = functools.partial(stacking.unstack, cfg=cfg)
  return new.replace(params=unstack(new.params), opt_state=unstack(new.opt_state)), metrics


def _adam_direction(opt_state, params):
  """Per param, the AdamW direction mu_hat / (sqrt(nu_hat) + eps) computed
  from the moments the state holds; 0 where the optimizer is masked off (the
  frozen router bias)."""
  opt = _config().opt
  is_adam = lambda s: isinstance(s, optax.ScaleByAdamState)
  (adam,) = [s for s in jax.tree.leaves(opt_state, is_leaf=is_adam) if is_adam(s)]
  n = np.float64(adam.count)

  def direction(mu, nu, p):
    if isinstance(mu, optax.MaskedNode):
      return np.zeros(np.shape(p))
    mu_hat = np.float64(mu) / (1 - opt.b1**n)
    nu_hat = np.float64(nu) / (1 - opt.b2**n)
    return mu_hat / (np.sqrt(nu_hat) + opt.eps)
  masked = lambda x: isinstance(x, optax.MaskedNode)
  return jax.tree.map(direction, adam.mu, adam.nu, params, is_leaf=masked), adam.mu


def _assert_same(got, want, rtol=1e-4, atol=1e-7):
  """Metrics and Adam's moments (mu is (1 - b1) * gradient: the gradients
  themselves) to `rtol`/`atol`; params to what those moments imply.

  Both runs step from the same params with the same learning rate, so their
  params differ by lr * (u1 - u0), u being each run's Adam direction, plus
  float32 rounding of the new params and the moment's own dtype's rounding
  of lr * u (optax steps with the unrounded mu, then stores it). A fixed
  absolute bound cannot hold here: Adam's first step mu_hat / sqrt(nu_hat)
  turns round-off in a near-zero gradient into a change of up to lr in that
  weight, and how large the round-off is depends on the CPU."""
  (s1, m1), (s0, m0) = got, want
  assert set(m1) == set(m0)
  for key in m0:
    np.testing.assert_allclose(m1[key], m0[key], rtol=rtol, atol=atol, err_msg=key)
  close = lambda rtol, atol: lambda a, b: np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
  jax.tree.map(close(rtol, atol), s1.opt_state, s0.opt_state)
  lr = float(m0['lr'])
  (u1, mu), (u0, _) = (_adam_direction(s.opt_state, s.params) for s in (s1, s0))
  mu_eps = {jnp.dtype(x.dtype) for x in jax.tree.leaves(mu)}
  mu_eps = max(float(jnp.finfo(d).eps) for d in mu_eps)
  f32 = float(jnp.finfo(jnp.float32).eps)

  def params_close(p1, p0, u1, u0):
    p1, p0 = np.float64(p1), np.float64(p0)
    bound = (lr * np.abs(u1 - u0) + lr * mu_eps * (np.abs(u1) + np.abs(u0))
             + 2 * f32 * (np.abs(p1) + np.abs(p0)))
    excess = np.abs(p1 - p0) - bound
    assert np.all(excess <= 0), (
        f'params differ by {np.max(np.abs(p1 - p0)):.3g}, beyond what the moments '
        f'imply by {np.max(excess):.3g}')
  jax.tree.map(params_close, s1.params, s0.params, u1, u0)


_MOE = {'moe.use_bias': True, 'moe.every': 2}


def test_remat_policies_give_the_plain_step():
  want = _step(_config(**_MOE))
  for policy in ('full', 'save_dots', 'save_dots_no_batch', 'save_moe'):
    _assert_same(_step(_config(**_MOE, **{'model.remat': policy})), want)


def test_chunked_loss_gives_the_plain_step():
  for tie in (False, True):
    want = _step(_config(**{'model.tie_embeddings': tie}))
    # 8 x 32 tokens in chunks of 64 (strided: each chunk takes tokens from every row).
    _assert_same(_step(_config(**{'model.tie_embeddings': tie, 'model.loss_chunk': 64})), want)


@pytest.mark.parametrize('scope,reduction', [('global', 'sum'), ('sequence', 'mean')])
def test_grad_accumulation_gives_the_one_batch_step(scope, reduction):
  """Balance and z losses (summed or averaged over MoE layers), the
  selection-bias update and every logged MoE metric come out as from the
  whole batch (the batch has padding and an all-padding row, so microbatches
  hold unequal token counts)."""
  keys = dict(_MOE, **{'moe.balance_scope': scope, 'moe.balance_loss_weight': 0.5,
                       'moe.z_loss_weight': 0.1, 'moe.bias_update_rate': 0.05,
                       'moe.router_loss_reduction': reduction})
  want = _step(_config(**keys))
  got = _step(_config(**keys, grad_accum_steps=4))
  _assert_same(got, want)
  # The bias moved by the whole batch's counts: a sign rule, so the same signs.
  for layer in ('layers_1',):
    assert np.any(np.asarray(got[0].params[layer]['moe']['router']['bias']) != 0)


def test_grad_accumulation_with_phases_remat_and_chunks_on_the_mesh():
  """All paths at once on the 8-device mesh (batch split 8 ways, each
  microbatch of 8 rows too), under seed 001's phase weights."""
  mesh = placement.make_mesh(_config().mesh)
  keys = dict(_MOE, batch_size=16, **{'moe.use_bias': True, 'phases.fractions': (0.5, 0.5),
                                      'phases.balance': (5.0, 1.0)})
  want = _step(_config(**keys), mesh)
  got = _step(_config(**keys, grad_accum_steps=2, **{'model.remat': 'save_moe',
                                                     'model.loss_chunk': 128}), mesh)
  _assert_same(got, want)


@pytest.mark.parametrize('stack, policies', [
    # (dense, MoE) x 2 then a dense rest, with the selection bias.
    ({'model.num_layers': 5}, ('none', 'save_moe')),
    # a dense prefix, (dense, MoE) x 1, a dense rest.
    ({'model.num_layers': 4, 'moe.first_dense': 1}, ('save_dots_no_batch',))])
def test_scan_layers_give_the_plain_step(stack, policies):
  """The scanned stack (models/scan.py) on the stacked train state under
  remat policies: same loss, gradients (Adam's moments), MoE metrics, bias
  update and params."""
  want = _step(_config(**_MOE, **stack))
  for policy in policies:
    got = _step(_config(**_MOE, **stack, **{'model.scan_layers': True, 'model.remat': policy}))
    assert jax.tree.structure(got[0].params) == jax.tree.structure(want[0].params)
    _assert_same(got, want)


def test_scan_layers_with_grad_accumulation_on_the_mesh():
  """Scan, accumulation (the whole batch's expert load passed into the
  scanned layers), remat and the chunked loss together, on the 8-device mesh."""
  mesh = placement.make_mesh(_config().mesh)
  keys = dict(_MOE, batch_size=16, **{'model.num_layers': 3, 'moe.bias_update_rate': 0.05})
  want = _step(_config(**keys), mesh)
  got = _step(_config(**keys, grad_accum_steps=2, **{
      'model.scan_layers': True, 'model.remat': 'full', 'model.loss_chunk': 128}), mesh)
  _assert_same(got, want)


def test_bf16_first_moment():
  """mu in bfloat16: the state holds bf16 moments, the step stays within bf16's precision."""
  want = _step(_config())
  got = _step(_config(**{'opt.mu_dtype': 'bfloat16'}))
  mus = [x for x in jax.tree.leaves(got[0].opt_state) if x.dtype == jnp.bfloat16]
  assert len(mus) == len(jax.tree.leaves(got[0].params))
  _assert_same(got, want, rtol=2e-2, atol=1e-4)


def _auto(platform='cpu', rows=8, **keys):
  """The microbatch count grad_accum_steps=0 resolves to for one device's rows."""
  config = _config(**keys)
  return accumulate.steps(config, model_config.from_config(config), rows, platform)


def test_auto_accumulation_takes_cache_sized_microbatches_on_cpu_only():
  dense = {'moe.num_experts': 0}
  # 8 rows x 32 tokens: 256 tokens a device, already a microbatch.
  assert _auto(**dense) == 1
  # 8 rows x 512 tokens: 4096 tokens, in microbatches of at most 1024.
  assert _auto(**dense, seq_len=512) == 4
  # One row over 1024 tokens: one row a microbatch.
  assert _auto(**dense, seq_len=2048) == 8
  # A loss chunk must divide a microbatch (batch_size 8 / n x 512 tokens).
  assert _auto(**dense, seq_len=512, **{'model.loss_chunk': 2048}) == 2
  assert _auto('gpu', **dense, seq_len=512) == 1
  assert _auto(**dense, seq_len=512, grad_accum_steps=2) == 2   # a set count is kept
  # MoE: the global balance loss would need the extra counting forward pass.
  assert _auto(seq_len=512) == 1
  assert _auto(seq_len=512, **{'moe.balance_scope': 'sequence'}) == 4


def test_the_program_runs_the_auto_count():
  """Auto's count is the one the program compiles: its step scans over
  microbatches (the reference attention has no loop of its own)."""
  def step_hlo(**keys):
    config = _config(**{'moe.num_experts': 0, 'model.attention': 'reference'}, seq_len=256,
                     **keys)
    config.mesh.num_devices = 1
    program = program_lib.build(config, placement.make_mesh(config.mesh))
    batch = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=program.batch_sharding),
        _batch(8, 256, 61))
    return program.grad_accum_steps, program.train_step.__wrapped__.lower(
        program.abstract_state, batch).as_text()
  n, hlo = step_hlo()
  assert n == 2 and 'stablehlo.while' in hlo
  n, hlo = step_hlo(grad_accum_steps=1)
  assert n == 1 and 'stablehlo.while' not in hlo
