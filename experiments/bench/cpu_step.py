r"""Training step on CPU: moe_jax against Hugging Face transformers, same shapes.

  python -m experiments.bench.cpu_step --out=cpu_step.json [--threads=1] [--reps=9]

The shapes are the main job's (configs/quickstart.py: d_model 96, 2 layers,
4 heads / 2 kv heads of 24, byte vocabulary 259, batch 16 x 128, float32,
AdamW with clipping):
  dense    MLP 384                       vs LlamaForCausalLM
  moe4     E=4 experts of 192, top-2     vs MixtralForCausalLM
  moe8     E=8 experts of 192, top-2     vs MixtralForCausalLM
  fine16   E=16 experts of 64, top-2     vs MixtralForCausalLM (the
           fine-grained regime of the seed-000 experiments)
and at issue 38's larger shape (d_model 256, 8 heads / 4 kv heads of 32,
batch 4 x 512, the same 2,048 tokens a step):
  dense_d256  MLP 1024                   vs LlamaForCausalLM
  moe4_d256   E=4 experts of 512, top-2  vs MixtralForCausalLM
moe_jax runs the trainer's own jitted step (`moe_jax.train.program.build`:
donated state, the quickstart's router bias update, balance and z losses), once
per `--dispatch` path and per variant of `--attention` x `--grad_accum_steps`
(each row records the attention path and microbatch count it ran);
transformers runs forward with labels (the Mixtral balance loss included),
backward, gradient clipping and torch's AdamW.

Each side lives in its own worker process (one process pair), pinned to the
same `--threads` cores, with `--threads` intra-op threads on both sides
(torch.set_num_threads; XLA:CPU sizes its pool from the process' CPU
affinity). After a warm-up that absorbs compilation, the parent asks the
workers for one timed repetition at a time, alternating sides and cases, so a
change in machine load hits both sides alike; `ratio` is the median over
repetitions of moe_jax tokens/s over the transformers repetition next to it.
Each repetition also records the worker's CPU time (time.process_time): on a
machine shared with other jobs, wall time counts the time the scheduler gives
to others, CPU time does not, so with one thread per side tokens per CPU
second is the steadier measure of the work a step costs.
torch and transformers are optional: without them only moe_jax is timed.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

from experiments import provenance

CASES = {   # name -> (experts, expert width); 0 experts: dense MLP of 384
    'dense': (0, 0),
    'moe4': (4, 192),
    'moe8': (8, 192),
    'fine16': (16, 64),
    'dense_d256': (0, 0),
    'moe4_d256': (4, 512),
}
D256 = dict(model=dict(d_model=256, num_heads=8, num_kv_heads=4, head_dim=32, d_ff=1024),
            batch_size=4, seq_len=512)
VOCAB = 259   # the byte tokenizer's


def make_config(case, dispatch='auto', overrides=None):
  """The quickstart config of one case (moe_jax's side); `overrides` {dotted
  key: value} on top (the step variants of --attention / --grad_accum_steps)."""
  from configs import quickstart  # pylint: disable=g-import-not-at-top
  experts, width = CASES[case]
  config = quickstart.get_config(f'experts={max(experts, 1)}')
  config.model.update(vocab_size=VOCAB, d_ff=384)   # quickstart's width is now the experts'
  if case.endswith('_d256'):
    config.model.update(D256['model'])
    config.update(batch_size=D256['batch_size'], seq_len=D256['seq_len'])
  config.moe.num_experts = experts
  if experts:
    config.moe.update(d_ff=width, dispatch=dispatch)
  for key, value in (overrides or {}).items():
    group, _, leaf = key.rpartition('.')
    (config[group] if group else config)[leaf] = value
  return config


def synthetic_tokens(config, seed=0):
  """[B, L + 1] int32 token ids, the same on both sides."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  return rng.integers(3, VOCAB, (config.batch_size, config.seq_len + 1)).astype(np.int32)


class JaxSide:
  """The trainer's step on one synthetic batch (one segment per row)."""

  def __init__(self, case, dispatch, overrides=None):
    import jax  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    from moe_jax.models import dispatch as dispatch_lib  # pylint: disable=g-import-not-at-top
    from moe_jax.train import program as program_lib  # pylint: disable=g-import-not-at-top
    from moe_jax.workdir import placement  # pylint: disable=g-import-not-at-top
    self._jax, self._placement = jax, placement
    config = make_config(case, dispatch, overrides)
    config.mesh.num_devices = 1
    tokens = synthetic_tokens(config)
    shape = (config.batch_size, config.seq_len)
    self.batch = dict(inputs=tokens[:, :-1], targets=tokens[:, 1:],
                      segment_ids=np.ones(shape, np.int32),
                      positions=np.broadcast_to(np.arange(shape[1], dtype=np.int32), shape).copy(),
                      loss_mask=np.ones(shape, np.float32))
    self.program = program_lib.build(config, placement.make_mesh(config.mesh))
    self.state = program_lib.init_state(self.program, config.seed)
    resolve = getattr(dispatch_lib, 'resolve', lambda name: name)   # a checkout before 'auto'
    try:
      from moe_jax.models import attention as attention_lib  # pylint: disable=g-import-not-at-top
      attention = attention_lib.resolve(self.program.model.cfg.attention)
    except (ImportError, AttributeError):   # a checkout before model.attention
      attention = 'reference'
    self.info = dict(dispatch=resolve(dispatch) if CASES[case][0] else None, attention=attention,
                     grad_accum_steps=getattr(self.program, 'grad_accum_steps',
                                              config.get('grad_accum_steps', 1)))

  def run(self, steps):
    """`steps` train steps, the batch put on the device each step as the
    trainer does, synced once at the end; returns the loss."""
    for _ in range(steps):
      batch = self._placement.put_batch(self.batch, self.program.batch_sharding)
      self.state, metrics = self.program.train_step(self.state, batch)
    return float(self._jax.block_until_ready(metrics['loss']))


class TorchSide:
  """LlamaForCausalLM / MixtralForCausalLM with the same shapes and optimizer."""

  def __init__(self, case):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    config = make_config(case)
    m, moe, opt = config.model, config.moe, config.opt
    common = dict(vocab_size=VOCAB, hidden_size=m.d_model, num_hidden_layers=m.num_layers,
                  num_attention_heads=m.num_heads, num_key_value_heads=m.num_kv_heads,
                  head_dim=m.head_dim, max_position_embeddings=config.seq_len,
                  rms_norm_eps=m.norm_eps, rope_theta=m.rope_theta, tie_word_embeddings=False)
    torch.manual_seed(0)
    if moe.num_experts:
      hf_config = transformers.MixtralConfig(
          intermediate_size=moe.d_ff, num_local_experts=moe.num_experts,
          num_experts_per_tok=moe.top_k, output_router_logits=True,
          router_aux_loss_coef=moe.balance_loss_weight, sliding_window=None, **common)
      self.model = transformers.MixtralForCausalLM(hf_config)
    else:
      hf_config = transformers.LlamaConfig(intermediate_size=m.d_ff, **common)
      self.model = transformers.LlamaForCausalLM(hf_config)
    self.model.train()
    self._torch, self._clip = torch, opt.clip_norm
    self.opt = torch.optim.AdamW(self.model.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2),
                                 eps=opt.eps, weight_decay=opt.weight_decay)
    # transformers shifts the labels itself: L + 1 tokens give L targets.
    self.tokens = torch.from_numpy(synthetic_tokens(config)).long()
    self.info = dict(model=type(self.model).__name__,
                     attn_implementation=self.model.config._attn_implementation,  # pylint: disable=protected-access
                     experts_implementation=getattr(self.model.config, '_experts_implementation',
                                                    None) if moe.num_experts else None)

  def run(self, steps):
    for _ in range(steps):
      loss = self.model(input_ids=self.tokens[:, :-1], labels=self.tokens[:, :-1]).loss
      loss.backward()
      self._torch.nn.utils.clip_grad_norm_(self.model.parameters(), self._clip)
      self.opt.step()
      self.opt.zero_grad(set_to_none=True)
    return loss.item()


def _versions(side):
  if side == 'jax':
    import jax, jaxlib, flax, optax  # pylint: disable=g-import-not-at-top,multiple-imports
    return dict(jax=jax.__version__, jaxlib=jaxlib.__version__, flax=flax.__version__,
                optax=optax.__version__, device=jax.devices()[0].device_kind,
                xla_flags=os.environ.get('XLA_FLAGS', ''))
  import torch, transformers  # pylint: disable=g-import-not-at-top,multiple-imports
  return dict(torch=torch.__version__, transformers=transformers.__version__,
              torch_threads=torch.get_num_threads())


def worker(side, cores):
  """Serves JSON requests on stdin: {'op': 'setup' | 'run', ...} -> one JSON line."""
  os.sched_setaffinity(0, cores)    # before jax or torch start their thread pools
  if side == 'torch':
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(len(cores))
  out = os.fdopen(os.dup(1), 'w')
  os.dup2(2, 1)   # library prints go to stderr; stdout carries the protocol only
  sides = {}
  for line in sys.stdin:
    req = json.loads(line)
    try:
      if req['op'] == 'versions':
        reply = _versions(side)
      elif req['op'] == 'setup':
        obj = (JaxSide(req['case'], req['dispatch'], req.get('overrides'))
               if side == 'jax' else TorchSide(req['case']))
        obj.run(req['steps'])   # compiles (jax) and warms up
        sides[req['key']] = obj
        reply = obj.info
      else:
        t0, c0 = time.perf_counter(), time.process_time()
        loss = sides[req['key']].run(req['steps'])
        reply = dict(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                     loss=loss)
    except Exception as e:  # pylint: disable=broad-except
      reply = dict(error=f'{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ""}')
    out.write(json.dumps(reply) + '\n')
    out.flush()


class Worker:
  """One side's process: this file run as a script, importing `configs` and
  `moe_jax` from `src` (default: the checkout this file is in)."""

  def __init__(self, side, threads, src=None):
    cores = sorted(os.sched_getaffinity(0))[:threads]
    src = os.path.abspath(src or os.path.join(os.path.dirname(__file__), '..', '..'))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get(
        'PYTHONPATH')])))
    self.proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), f'--worker={side}',
         f'--cores={",".join(map(str, cores))}'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=src)

  def ask(self, **req):
    self.proc.stdin.write(json.dumps(req) + '\n')
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line:
      raise RuntimeError(f'worker exited with {self.proc.wait()}')
    return json.loads(line)

  def close(self):
    self.proc.stdin.close()
    self.proc.wait()


def _has_torch():
  try:
    import torch, transformers  # pylint: disable=g-import-not-at-top,multiple-imports,unused-import
    return True
  except ImportError:
    return False


def parse_cases(ap, text):
  """The comma-separated `--cases`; an unknown one is an argparse error."""
  cases = text.split(',')
  unknown = [c for c in cases if c not in CASES]
  if unknown:
    ap.error(f'--cases: {unknown} not in {list(CASES)}')
  return cases


def write_json(path, obj):
  """Writes `obj` (a dict) with its provenance to `path` atomically (a temp
  file, then a rename)."""
  with open(path + '.tmp', 'w') as f:
    json.dump(dict(obj, provenance=provenance.record()), f, indent=1)
  os.replace(path + '.tmp', path)


def median(values):
  values = sorted(values)
  n = len(values)
  return (values[n // 2] + values[(n - 1) // 2]) / 2 if n else None


def tokens_per_step(case):
  config = make_config(case)
  return config.batch_size * config.seq_len


def summarize(rows, tokens_of):
  """Adds tokens per second and per CPU second (medians), and each moe_jax
  row's ratios against transformers; `tokens_of(case)` is a step's tokens."""
  torch_rows = {r['case']: r for r in rows if r['side'] == 'torch' and r.get('seconds')}
  for r in rows:
    if not r.get('seconds'):
      continue
    ref = torch_rows.get(r['case'])
    for key, out in (('seconds', 'tokens_per_s'), ('cpu_seconds', 'tokens_per_cpu_s')):
      tokens = tokens_of(r['case'])
      rate = [tokens * r['steps'] / s for s in r[key]]
      r[out] = median(rate)
      if r['side'] != 'torch' and ref:
        ref_rate = [tokens * ref['steps'] / s for s in ref[key]]
        r[out.replace('tokens_per', 'ratio')] = median(
            [a / b for a, b in zip(rate, ref_rate)])
  return rows


def markdown(rows):
  lines = ['| case | side | dispatch | attention | microbatches | tokens/s | ratio | '
           'tokens/CPU-s | ratio (CPU time) |', '|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    if 'error' in r:
      lines.append(f'| {r["case"]} | {r["side"]} | {r.get("dispatch") or ""} | | | error: '
                   f'{r["error"]} | | | |')
      continue
    ratios = [f'{r[k]:.2f}x' if k in r else '' for k in ('ratio_s', 'ratio_cpu_s')]
    who = r.get('model') or ('moe_jax (baseline)' if r['side'] == 'baseline' else 'moe_jax')
    lines.append(f'| {r["case"]} | {who} | {r.get("dispatch") or ""} | '
                 f'{r.get("attention") or ""} | {r.get("grad_accum_steps") or ""} | '
                 f'{r["tokens_per_s"]:,.0f} | {ratios[0]} | {r["tokens_per_cpu_s"]:,.0f} | '
                 f'{ratios[1]} |')
  return '\n'.join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', help='results JSON path')
  ap.add_argument('--cases', default=','.join(CASES))
  ap.add_argument('--dispatch', default='auto', help='moe_jax dispatch paths, comma-separated')
  ap.add_argument('--attention', default='',
                  help="moe_jax attention paths, comma-separated ('': the config's)")
  ap.add_argument('--grad_accum_steps', default='',
                  help="moe_jax microbatch counts, comma-separated (0: auto; '': the config's)")
  ap.add_argument('--threads', type=int, default=1, help='cores and intra-op threads per side')
  ap.add_argument('--reps', type=int, default=9, help='timed repetitions per row')
  ap.add_argument('--steps', type=int, default=5, help='train steps per repetition')
  ap.add_argument('--no_torch', action='store_true', help='time moe_jax only')
  ap.add_argument('--baseline_src', help='another moe_jax checkout (e.g. a copy of main) '
                  'timed in a third worker, interleaved with the others: a before/after run')
  ap.add_argument('--baseline_dispatch', default='ragged',
                  help="the baseline's dispatch paths (checkouts before 'auto' need one)")
  ap.add_argument('--worker', choices=('jax', 'torch'), help=argparse.SUPPRESS)
  ap.add_argument('--cores', help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  if args.worker:
    return worker(args.worker, [int(c) for c in args.cores.split(',')])
  cases = parse_cases(ap, args.cases)
  if not args.out:
    ap.error('--out is required')
  if not 1 <= args.threads <= len(os.sched_getaffinity(0)):
    ap.error(f'--threads={args.threads}: this process may use {len(os.sched_getaffinity(0))} cores')
  use_torch = not args.no_torch and _has_torch()
  variants = [dict(([('model.attention', a)] if a else [])
                   + ([('grad_accum_steps', int(n))] if n else []))
              for a in args.attention.split(',') for n in args.grad_accum_steps.split(',')]
  workers = {'jax': Worker('jax', args.threads)}
  if args.baseline_src:
    workers['baseline'] = Worker('jax', args.threads, args.baseline_src)
  if use_torch:
    workers['torch'] = Worker('torch', args.threads)
  rows = []
  for case in cases:
    for side, paths in (('baseline', args.baseline_dispatch), ('jax', args.dispatch)):
      if side not in workers:
        continue
      for dispatch in (paths.split(',') if CASES[case][0] else ['auto']):
        for overrides in (variants if side == 'jax' else [{}]):
          rows.append(dict(case=case, side=side, requested_dispatch=dispatch,
                           overrides=overrides,
                           key=f'{case}/{dispatch}/{sorted(overrides.items())}'))
    if use_torch:
      rows.append(dict(case=case, side='torch', key=case))
  load_before = os.getloadavg()
  for r in rows:
    r.update(workers[r['side']].ask(op='setup', key=r['key'], case=r['case'],
                                    dispatch=r.get('requested_dispatch'),
                                    overrides=r.get('overrides'), steps=2),
             steps=args.steps, seconds=[], cpu_seconds=[])
  for _ in range(args.reps):
    for r in rows:
      if 'error' in r:
        continue
      reply = workers[r['side']].ask(op='run', key=r['key'], steps=args.steps)
      if 'error' in reply:
        r['error'] = reply['error']
      else:
        r['seconds'].append(reply['seconds'])
        r['cpu_seconds'].append(reply['cpu_seconds'])
        r['loss'] = reply['loss']
  summarize(rows, tokens_per_step)
  meta = dict(
      date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
      cpu=_cpu_model(), machine_cores=os.cpu_count(), threads=args.threads,
      load_avg_before=load_before, load_avg_after=os.getloadavg(),
      python=platform.python_version(),
      **{k: v for w in workers.values() for k, v in w.ask(op='versions').items()},
      baseline_src=args.baseline_src,
      timing=(f'{args.reps} repetitions of {args.steps} steps per row after 2 warm-up steps; '
              'rows interleaved; tokens/s (wall) and tokens/CPU-s (process_time) are medians '
              'over repetitions; ratios = medians over repetitions of moe_jax / the adjacent '
              'transformers repetition'))
  for w in workers.values():
    w.close()
  for r in rows:
    r.pop('key')
  write_json(args.out, dict(meta=meta, results=rows))
  print(json.dumps(meta, indent=1))
  print(markdown(rows))


def _cpu_model():
  try:
    with open('/proc/cpuinfo') as f:
      return next((l.split(':', 1)[1].strip() for l in f if l.startswith('model name')), '')
  except OSError:
    return platform.processor()


if __name__ == '__main__':
  main()
