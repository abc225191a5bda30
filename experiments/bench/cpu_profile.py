r"""Where the CPU training step's time goes: a per-part breakdown, both sides.

  python -m experiments.bench.cpu_profile --out=cpu_profile.json [--cases=moe4] [--reps=7]

At the shapes of cpu_step.py (the quickstart's), one process pinned to one
core (XLA:CPU and torch with one thread each) times these parts of one step,
each on its own (jitted on the moe_jax side):
  step       the whole train step (cpu_step.py's JaxSide / TorchSide)
  fwd        forward and loss
  fwd_bwd    forward, loss and gradients of all parameters
  optimizer  the rest of the step given gradients: moe_jax's clipping, AdamW,
             schedule and router-bias update; torch's clip_grad_norm_, AdamW
             step and zero_grad
  ffn        one layer's FFN forward+backward (MoE block: router, dispatch,
             experts, statistics; or the dense MLP) on the step's [B, L, D]
             input, gradients to the input and the block's parameters
  attention  one layer's attention forward+backward (moe_jax only: calling a
             transformers attention layer alone needs its rotary and mask
             plumbing), likewise
`ffn` and `attention` are per layer: the step runs `layers` of each. Parts
are interleaved (one call each per round, `--reps` rounds after two warm-up
calls); medians of the process' CPU time (the work the part costs, whatever
else the shared machine runs) and of wall time.
"""
import argparse
import datetime
import json
import os
import sys
import time

from experiments.bench import cpu_step


def _jax_parts(case, dispatch):
  """{part: zero-argument callable that runs the part once, synced}."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from moe_jax.models import attention, mlp, moe, router, stacking  # pylint: disable=g-import-not-at-top,multiple-imports
  from moe_jax.train import accumulate  # pylint: disable=g-import-not-at-top
  side = cpu_step.JaxSide(case, dispatch)
  program, batch = side.program, side.batch
  model, cfg = program.model, program.model.cfg
  params = jax.tree.map(jnp.copy, side.state.params)   # side.run donates side.state

  def loss(p):
    ce, _, aux = accumulate.loss_terms(model, p, batch, jax.random.key(0))
    return ce + aux['aux_loss'], aux

  fwd = jax.jit(lambda p: loss(p)[0])
  fwd_bwd = jax.jit(jax.value_and_grad(loss, has_aux=True))
  (_, aux), grads = fwd_bwd(params)
  config = program.config
  bias_rate = config.moe.bias_update_rate if config.moe.use_bias else 0.0

  def update(state, grads, aux):
    # train_step after its value_and_grad (moe_jax/train/step.py).
    updates, opt_state = program.tx.update(grads, state.opt_state, state.params)
    lr = program.lr_fn(state.step)
    p = optax.apply_updates(state.params, jax.tree.map(lambda u: lr * u, updates))
    if bias_rate:
      p = router.update_biases(p, {'moe': stacking.stack(aux['moe'], cfg)}, bias_rate)
    return state.replace(step=state.step + 1, params=p, opt_state=opt_state), (
        optax.tree.norm(grads), optax.tree.norm(p))

  optimizer = jax.jit(update)
  x_BLD = jax.random.normal(jax.random.key(1), batch['inputs'].shape + (cfg.d_model,))
  layer = stacking.unstack(params, cfg)['layers_0']
  valid_BL = batch['segment_ids'] != 0
  if cfg.moe.num_experts:
    block = moe.MoE(cfg)
    ffn_apply = lambda p, x: jnp.sum(block.apply({'params': p}, x, batch['inputs'], valid_BL,
                                                 True, rngs={'jitter': jax.random.key(2)})[0])
    ffn_params = layer['moe']
  else:
    block = mlp.MLP(cfg.d_ff, cfg.init_std)
    ffn_apply = lambda p, x: jnp.sum(block.apply({'params': p}, x))
    ffn_params = layer['mlp']
  attn = attention.Attention(cfg)
  attn_apply = lambda p, x: jnp.sum(attn.apply({'params': p}, x, batch['segment_ids'],
                                               batch['positions']))
  ffn = jax.jit(jax.grad(ffn_apply, argnums=(0, 1)))
  attn_grad = jax.jit(jax.grad(attn_apply, argnums=(0, 1)))
  sync = jax.block_until_ready
  return dict(
      step=lambda: side.run(1),
      fwd=lambda: sync(fwd(params)),
      fwd_bwd=lambda: sync(fwd_bwd(params)),
      optimizer=lambda: sync(optimizer(side.state, grads, aux)),
      ffn=lambda: sync(ffn(ffn_params, x_BLD)),
      attention=lambda: sync(attn_grad(layer['attn'], x_BLD)))


def _torch_parts(case):
  import torch  # pylint: disable=g-import-not-at-top
  side = cpu_step.TorchSide(case)
  model, tokens = side.model, side.tokens[:, :-1]
  hidden = model.config.hidden_size
  x_BLD = torch.randn(*tokens.shape, hidden, requires_grad=True)
  ffn_block = model.model.layers[0].mlp

  def fwd():
    with torch.no_grad():
      model(input_ids=tokens, labels=tokens)

  def fwd_bwd():
    model(input_ids=tokens, labels=tokens).loss.backward()

  def optimizer():
    torch.nn.utils.clip_grad_norm_(model.parameters(), side._clip)  # pylint: disable=protected-access
    side.opt.step()
    # Zeroed in place, not freed: AdamW skips parameters whose grad is None.
    # fwd_bwd, called just before in each round, refills them.
    side.opt.zero_grad(set_to_none=False)

  def ffn():
    out = ffn_block(x_BLD)
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()

  fwd_bwd()   # gradients for optimizer()
  return dict(step=lambda: side.run(1), fwd=fwd, fwd_bwd=fwd_bwd, optimizer=optimizer,
              ffn=ffn)


def time_parts(parts, reps):
  """Medians (ms) of CPU and wall time per part, calls interleaved."""
  for fn in parts.values():
    fn()
    fn()
  cpu = {n: [] for n in parts}
  wall = {n: [] for n in parts}
  for _ in range(reps):
    for name, fn in parts.items():
      t0, c0 = time.perf_counter(), time.process_time()
      fn()
      wall[name].append(time.perf_counter() - t0)
      cpu[name].append(time.process_time() - c0)
  return ({n: cpu_step.median(v) * 1e3 for n, v in cpu.items()},
          {n: cpu_step.median(v) * 1e3 for n, v in wall.items()})


def markdown(results, layers):
  lines = ['| case | side | step | fwd | fwd+bwd | optimizer | FFN fwd+bwd x layers | '
           'attention fwd+bwd x layers | rest of fwd+bwd |', '|---|---|---|---|---|---|---|---|---|']
  for r in results:
    ms = r['cpu_ms']
    attn = ms.get('attention')
    rest = ms['fwd_bwd'] - layers * (ms['ffn'] + (attn or 0))
    cell = lambda v: '' if v is None else f'{v:.1f}'
    lines.append(f'| {r["case"]} | {r["side"]} | {cell(ms["step"])} | {cell(ms["fwd"])} | '
                 f'{cell(ms["fwd_bwd"])} | {cell(ms["optimizer"])} | {cell(layers * ms["ffn"])} | '
                 f'{cell(attn and layers * attn)} | {cell(rest)}'
                 f'{"" if attn else " (attention included)"} |')
  return '\n'.join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='results JSON path')
  ap.add_argument('--cases', default='dense,moe4,moe8')
  ap.add_argument('--dispatch', default='auto', help="moe_jax's dispatch path")
  ap.add_argument('--reps', type=int, default=7)
  ap.add_argument('--no_torch', action='store_true', help='time moe_jax only')
  args = ap.parse_args(argv)
  cases = cpu_step.parse_cases(ap, args.cases)
  os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1])   # before the thread pools start
  use_torch = not args.no_torch and cpu_step._has_torch()  # pylint: disable=protected-access
  if use_torch:
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(1)
  load_before = os.getloadavg()
  results = []
  for case in cases:
    sides = [('moe_jax', lambda: _jax_parts(case, args.dispatch))]
    if use_torch:
      sides.append(('transformers', lambda: _torch_parts(case)))
    for side, make in sides:
      cpu_ms, wall_ms = time_parts(make(), args.reps)
      results.append(dict(case=case, side=side, cpu_ms=cpu_ms, wall_ms=wall_ms))
      print(json.dumps(results[-1]), flush=True)
  meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              load_avg_before=load_before, load_avg_after=os.getloadavg(), threads=1,
              dispatch=args.dispatch, layers=cpu_step.make_config(cases[0]).model.num_layers,
              timing=f'2 warm-up calls, then {args.reps} interleaved rounds; medians (ms)',
              **cpu_step._versions('jax'),  # pylint: disable=protected-access
              **(cpu_step._versions('torch') if use_torch else {}))  # pylint: disable=protected-access
  cpu_step.write_json(args.out, dict(meta=meta, results=results))
  print(markdown(results, meta['layers']))


if __name__ == '__main__':
  sys.exit(main())
