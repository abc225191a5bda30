"""Fine-grained and shared-expert MoEs in the parameter and FLOP counts
(models/accounting.py through run_record.summary) and in the planner's
options, against a hand count."""
import json

from configs import common
from configs.upcycle import finegrained as finegrained_config
from moe_jax import model_name, plan as plan_cli
from moe_jax.upcycle import transition
from moe_jax.workdir import run_record
from tests import flag_main
from tests.scaling_laws.test_plan import _workdir


def _dense():
  c = common.base()
  c.model.update(vocab_size=11, d_model=8, num_layers=2, num_heads=2, num_kv_heads=1,
                 head_dim=4, d_ff=16)
  c.seq_len = 32
  return c


def _fine(arg):
  c = _dense()
  c.upcycle = finegrained_config.get_config(arg)
  return transition.target_config(c)


def test_counts_of_a_finegrained_moe_with_a_shared_expert_by_hand():
  # d = 8, F = 16, E = 2, k = 1, G = 4: 8 experts of width 4, top-4, and the
  # shared expert (4 units of width 4 = the dense MLP), router with bias.
  s = run_record.summary(_fine('experts=2,top_k=1,granularity=4,shared'))
  attn = 8 * 2 * 4 * 2 + 8 * 1 * 4 * 2          # q, o; k, v
  norms, expert, shared = 2 * 8, 3 * 8 * 4, 3 * 8 * 16
  router = 8 * 8 + 8                              # w [D, E G] and bias [E G]
  active = attn + norms + 4 * expert + shared + router
  total = attn + norms + 8 * expert + shared + router
  assert (s['num_experts'], s['top_k'], s['expert_d_ff'], s['num_shared_experts']) == (8, 4, 4, 4)
  assert s['nonembed_active'] == 2 * active + 8 == 2 * 1048 + 8
  assert s['nonembed'] == 2 * total + 8 == 2 * 1432 + 8
  assert s['params'] == s['nonembed'] + 2 * 11 * 8
  assert s['dense_nonembed'] == 2 * (attn + norms + 3 * 8 * 16) + 8
  # Forward FLOPs per token: 2 x active non-embedding + attention 2 L ctx H K.
  assert s['flops_per_token'] == 2 * (2 * active + 8) + 2 * 2 * 32 * 2 * 4
  # Qwen2-MoE's shared gate: one [D, 1] weight per MoE layer, active.
  gated = run_record.summary(_fine('experts=2,top_k=1,granularity=4,shared,shared_gate'))
  assert gated['nonembed_active'] - s['nonembed_active'] == gated['nonembed'] - s['nonembed'] == 16


def test_granularity_keeps_active_and_total_expert_params():
  # E G experts of width F / G, top-(k G): the same expert parameters, active
  # and total, as G = 1; only the router grows (D E (G - 1) weights, E (G - 1) biases).
  one, four = (run_record.summary(_fine(f'experts=4,top_k=2,granularity={g}')) for g in (1, 4))
  router_growth = 2 * (8 * 4 * 3 + 4 * 3)
  assert four['nonembed_active'] - one['nonembed_active'] == router_growth
  assert four['nonembed'] - one['nonembed'] == router_growth


def test_the_planner_offers_finegrained_and_shared_options(tmp_path, capsys):
  workdir = _workdir(tmp_path / 'dense', _dense(), 3000, seconds=0.1, devices=1)
  argv = [f'--ckpt={workdir}', '--budget=1e6tokens', '--experts=2', '--top_k=1',
          '--granularity=1,4', '--shared', '--json']
  assert flag_main.call(plan_cli, argv) == 0, capsys.readouterr().err
  options = {o['name']: o for o in json.loads(capsys.readouterr().out)['options']}
  assert {'fine_2x_g1_shared', 'fine_2x_g4_shared', 'scratch_2x_g4_shared'} <= set(options)
  model = options['fine_2x_g4_shared']['model']
  # The planner's targets have no selection bias (as its sparse_Ex ones).
  assert model == run_record.summary(_fine('experts=2,top_k=1,granularity=4,shared,bias=False'))
  assert options['scratch_2x_g4_shared']['model'] == model
  assert model_name.describe(model) == 'MoE 8x top-4 (d_ff 4, 4 shared)'
