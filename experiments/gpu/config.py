"""The models of the GPU script (experiments/gpu/run.py).

  python -m moe_jax.main --config=experiments/gpu/config.py:small --workdir=DIR
  python -m moe_jax.plan --memory --config=experiments/gpu/config.py:10layer

`workflow`: an MoE of about 85M parameters (d_model 512, 12 scanned layers, GQA 8/4
heads, 4 experts of width 1024 in every layer, top-2) on the default corpus,
grown in the run to 8 experts (expand_experts) at tau = total_steps / 2:
about 160M after. Every layer is MoE, the router Mixtral's (no selection
bias, so no bias noise
on the copies), so `export_hf` writes it as Mixtral. `10layer`: the step
experiments.bench.mesh_step times for the speed rows, 16 sequences of 1024
on one device (its best batch, docs/benchmarks.md). `:tiny` of any of them
is the CPU size of the script's --dry_run (`small,tiny`).

`small`: the workflow call B runs (one call of under 5 minutes, run.py):
the same model at 4 layers, 40 steps, grown at tau = 20. The first H200 call
(docs/benchmarks/gpu.md, 2026-11-28) ran the 12 layers unscanned: 39 s to
step 1 (its compile), then 0.185 s a step, and an unlogged 117 s at the
transition. At 4 scanned layers each should take about a third of that:
~13 s of compile, 0.06 s a step (3 s for the 40 steps), ~40 s at tau.
"""
import ml_collections

from configs import common


def get_config(arg='workflow'):
  arg = common.parse_arg(arg, size='workflow', tiny=False)
  if arg.size == '10layer':
    return _speed(arg.tiny)
  config = common.base()
  common.apply_preset(config, 'tiny')
  config.model.update(d_model=512, num_layers=12, num_heads=8, num_kv_heads=4, head_dim=64,
                      d_ff=1024, dtype='bfloat16', scan_layers=True)
  config.moe.update(num_experts=4, top_k=2, d_ff=1024, every=1, use_bias=False,
                    balance_loss_weight=0.01)
  steps = 200
  if arg.size == 'small':
    config.model.num_layers, steps = 4, 40
  config.update(total_steps=steps, batch_size=16, seq_len=512, log_every_steps=1,
                eval_every_steps=0, eval_batches=4, checkpoint_every_steps=steps // 2)
  config.opt.update(lr=1e-3, warmup_steps=20)
  config.ckpt.async_save = False
  if arg.tiny:
    config.model.update(d_model=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16,
                        d_ff=32, dtype='float32')
    config.moe.d_ff = 32
    steps = 8
    config.update(total_steps=steps, batch_size=4, seq_len=32, eval_batches=2,
                  checkpoint_every_steps=steps // 2)
    config.opt.warmup_steps = 2
  config.upcycle.update(step=steps // 2, recipe='expand_experts')
  config.upcycle.target = ml_collections.ConfigDict({'moe': {'num_experts': 8}})
  # No selection bias to perturb (Mixtral's router has none): copies start tied.
  config.upcycle.args = ml_collections.ConfigDict({'delta': 0.0})
  return config


def _speed(tiny):
  """mesh_step's config of one speed row (pallas_mosaic_gpu, reference
  attention, whole-batch loss), for the memory plan."""
  from experiments.bench import mesh_step  # pylint: disable=g-import-not-at-top
  grid = dict(mesh_step.SMALL if tiny else mesh_step.FULL, preset='tiny' if tiny else '10layer',
              dispatch='auto' if tiny else 'pallas_mosaic_gpu',
              batch_per_device=2 if tiny else 16, attention='reference')
  config, _ = mesh_step.make_config(grid, 8, 2, dict(data=1))
  return config
