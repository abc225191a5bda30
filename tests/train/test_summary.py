"""The start summary a run prints: parameter counts, tokens per step, devices
and mesh, the dispatch path, steps and where it writes, from the run's own
records (never a constant)."""
import jax

from configs import common
from moe_jax.train import summary
from moe_jax.upcycle import transition
from moe_jax.workdir import lineage_table, placement, run_record


def _lines(config, start=0):
  mesh = placement.make_mesh(config.mesh)
  config.moe.dispatch = 'grouped'
  return summary.start_lines(config, run_record.build(config), mesh, '/tmp/run', start)


def test_the_summary_names_what_the_run_is():
  config = common.base()
  config.model.vocab_size = 256
  config.moe.update(num_experts=8, top_k=2)
  config.mesh.update(data=4, expert=2)
  counts = run_record.summary(config)
  text = '\n'.join(_lines(config, start=100))
  assert f'MoE 8x top-2, {lineage_table.num(counts["params"])} params (' \
         f'{lineage_table.num(counts["params_active"])} active)' in text
  assert counts['params'] > counts['params_active']
  assert 'tokens   2,048 per step (batch 16 x seq_len 128)' in text
  assert (f'devices  {jax.device_count()} cpu, mesh data=4 fsdp=1 expert=2 tensor=1, moe.dispatch '
          'grouped (expert-parallel all-to-all)') in text
  assert 'steps    100 -> 300 (resuming from checkpoint 100)' in text
  assert 'writes   /tmp/run: checkpoints/ every 100 steps' in text


def test_a_dense_run_names_no_dispatch_and_an_in_run_growth_says_when():
  config = common.base()
  config.model.vocab_size = 256
  lines = _lines(config)
  assert lines[0].startswith('model    dense, ') and 'dispatch' not in '\n'.join(lines)
  config.moe.update(num_experts=4, top_k=2, use_bias=True)   # what the replicas' noise perturbs
  config.upcycle.update(step=50, recipe='expand_experts')
  grown = transition.target_config(config)
  mesh = placement.make_mesh(config.mesh)
  lines = summary.start_lines(config, run_record.build(config, grown), mesh, '/tmp/run', 0)
  assert lines[1].startswith('grows    at step 50 by expand_experts to MoE 8x top-2, ')


def test_the_summary_says_when_auto_accumulation_split_the_batch():
  config = common.base()
  config.model.vocab_size = 256
  mesh = placement.make_mesh(config.mesh)
  lines = lambda n: [line for line in summary.start_lines(
      config, run_record.build(config), mesh, '/tmp/run', 0, n) if line.startswith('memory ')]
  assert lines(1) == []
  assert lines(4) == ['memory   grad_accum_steps auto: 4 microbatches (CPU, cache-sized)']
  config.grad_accum_steps = 4
  assert lines(4) == ['memory   grad_accum_steps 4']
