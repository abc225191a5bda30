"""`python -m moe_jax.main` over bad inputs: each exits 2 (1: a diverged run)
with one `error:` line naming the key, path or value, no traceback, and
writes nothing (the row's directory and the trained workdir hash the same)."""
import pytest

from tests.robustness import damage, harness, rows
from tests.robustness.rows import param

MOE = '--config={configs}/lm_moe.py:tiny --config.total_steps=2 --config.seq_len=16'
NEW = f'{MOE} --workdir={{tmp}}/run'     # a new workdir
RESUME = '--config={cfg} --workdir={copy}'  # the trained run, continued in a private copy
GROW = '--config.upcycle.step=1 --config.upcycle.recipe=expand_experts'
EINSUM = '--config.moe.dispatch=einsum'


def _file(relpath, data):
  return lambda p: damage.write(p['tmp'], relpath, data)


def _copy(fn, *args):
  return lambda p: fn(p['copy'], *args)


def _json(relpath, edit):
  def setup(p):
    damage.edit_json(p['copy'], relpath, edit)
  return setup


def _set(*keys_value):
  *keys, value = keys_value

  def edit(record):
    for key in keys[:-1]:
      record = record[key]
    record[keys[-1]] = value
  return edit


def _texts(*names_data):
  def setup(p):
    for name, data in zip(names_data[::2], names_data[1::2]):
      damage.write(p['tmp'], f'corpus/{name}', data)
  return setup


ROWS = [
    # Flags and the command line.
    param('stray_positional', f'{NEW} extra', r'unexpected argument: extra'),
    param('missing_workdir_flag', MOE, r'--workdir'),
    param('unknown_flag', f'{NEW} --wrkdir=x', r'wrkdir'),
    # The config file.
    param('config_missing', '--config={tmp}/nope.py --workdir={tmp}/run',
          r'--config=.*nope.py: no such file'),
    param('config_is_directory', '--config={tmp} --workdir={tmp}/run', r'--config=.*: not a file'),
    param('config_syntax_error', '--config={tmp}/c.py --workdir={tmp}/run',
          r'--config=.*c.py:1: invalid syntax', _file('c.py', 'def get_config(:\n')),
    param('config_without_get_config', '--config={tmp}/c.py --workdir={tmp}/run',
          r'c.py: defines no get_config', _file('c.py', 'x = 1\n')),
    param('config_raises', '--config={tmp}/c.py --workdir={tmp}/run',
          r'c.py:2: get_config raised RuntimeError: boom',
          _file('c.py', 'def get_config(arg=None):\n  raise RuntimeError("boom")\n')),
    param('config_raises_key_error', '--config={tmp}/c.py --workdir={tmp}/run',
          r"c.py:2: get_config raised KeyError: 'nope'",
          _file('c.py', 'def get_config(arg=None):\n  return {}["nope"]\n')),
    param('config_returns_int', '--config={tmp}/c.py --workdir={tmp}/run',
          r'get_config returned int, not a ConfigDict',
          _file('c.py', 'def get_config(arg=None):\n  return 3\n')),
    param('config_returns_none', '--config={tmp}/c.py --workdir={tmp}/run',
          r'c.py: get_config returned None', _file('c.py', 'def get_config(arg=None):\n  pass\n')),
    param('config_not_utf8', '--config={tmp}/c.py --workdir={tmp}/run', r'c.py:2: .*utf-8',
          _file('c.py', b'def get_config(arg=None):\n  return "\xff\xfe"\n')),
    param('config_bad_argument', '--config={configs}/lm_moe.py:huge --workdir={tmp}/run',
          r"model preset 'huge' is not one of"),
    # Overrides.
    param('unknown_key', f'{NEW} --config.bogus=3', r"config has no key 'bogus'"),
    param('unknown_nested_key', f'{NEW} --config.model.bogus=3', r"config has no key 'bogus'"),
    param('override_not_a_number', f'{NEW} --config.model.d_model=abc',
          r'--config.model.d_model=abc'),
    param('override_of_a_group', f'{NEW} --config.model=3', r'--config.model'),
    # Values.
    param('total_steps_negative', f'{NEW} --config.total_steps=-1',
          r'total_steps=-1 must be a positive integer'),
    param('seq_len_zero', f'{NEW} --config.seq_len=0', r'seq_len=0 must be a positive integer'),
    param('log_every_zero', f'{NEW} --config.log_every_steps=0', r'log_every_steps=0'),
    param('eval_every_negative', f'{NEW} --config.eval_every_steps=-1', r'eval_every_steps=-1'),
    param('keep_negative', f'{NEW} --config.ckpt.keep=-1', r'ckpt.keep=-1'),
    param('warmup_negative', f'{NEW} --config.opt.warmup_steps=-5', r'opt.warmup_steps=-5'),
    param('lr_zero', f'{NEW} --config.opt.lr=0', r'opt.lr=0.0 must be > 0.0'),
    param('decay_fraction', f'{NEW} --config.opt.decay_fraction=1.5',
          r'opt.decay_fraction=1.5 must be in \[0.0, 1.0\]'),
    param('seed_negative', f'{NEW} --config.seed=-1', r'seed=-1 must be non-negative'),
    param('top_k_above_experts', f'{NEW} --config.moe.top_k=9',
          r'moe.top_k=9 must be in \[1, moe.num_experts=8\]'),
    param('top_k_before_bpe_is_trained', f'{NEW} --config.data.tokenizer=bpe --config.moe.top_k=9',
          r'moe.top_k=9'),
    param('dispatch_unknown', f'{NEW} --config.moe.dispatch=fast', r"moe.dispatch='fast'"),
    param('kv_heads', f'{NEW} --config.model.num_kv_heads=3', r'model.num_kv_heads=3'),
    param('batch_not_divisible', f'{NEW} --config.batch_size=12', r'batch_size=12'),
    param('remat_unknown', f'{NEW} --config.model.remat=most', r"model.remat='most'"),
    param('grad_accum_not_dividing', f'{NEW} --config.grad_accum_steps=3',
          r'grad_accum_steps=3 must be 0 \(auto\) or a positive integer dividing'),
    param('loss_chunk_not_dividing', f'{NEW} --config.model.loss_chunk=7',
          r'model.loss_chunk=7 must be 0 or divide'),
    param('mu_dtype_unknown', f'{NEW} --config.opt.mu_dtype=int8', r"opt.mu_dtype='int8'"),
    param('experts_not_divisible_by_mesh', f'{NEW} --config.mesh.expert=3',
          r'moe.num_experts=8 is not divisible by mesh.expert=3'),
    param('vocab_below_tokenizer', f'{NEW} --config.model.vocab_size=10',
          r"model.vocab_size=10 is smaller than the byte tokenizer's 259 ids"),
    param('upcycle_step_past_end', f'{NEW} --config.upcycle.step=5 '
          '--config.upcycle.recipe=expand_experts', r'upcycle.step=5 must be below total_steps=2'),
    param('upcycle_recipe_unknown', f'{NEW} --config.upcycle.step=1 --config.upcycle.recipe=grow',
          r"upcycle.recipe='grow' is not one of"),
    param('init_from_missing', f'{NEW} --config.init_from=/no/such/ckpt',
          r"init_from='/no/such/ckpt' does not exist"),
    param('init_from_not_a_checkpoint', f'{NEW} --config.init_from={{tmp}}/src',
          r'is neither a workdir, a checkpoints directory nor a step directory',
          _file('src/notes.txt', 'hi')),
    param('init_from_other_shape', '--config={cfg} --workdir={tmp}/run --config.init_from={wd} '
          '--config.model.d_ff=32', r'does not match the config: .*wi_0'),
    # More values, one key each (nan and inf included: they pass every comparison).
    param('total_steps_not_int', f'{NEW} --config.total_steps=abc', r'--config.total_steps=abc'),
    param('batch_size_zero', f'{NEW} --config.batch_size=0',
          r'batch_size=0 must be a positive integer'),
    param('eval_batches_negative', f'{NEW} --config.eval_batches=-2', r'eval_batches=-2'),
    param('worker_count_negative', f'{NEW} --config.data.worker_count=-1', r'data.worker_count=-1'),
    param('lr_nan', f'{NEW} --config.opt.lr=nan', r'opt.lr=nan must be a finite number'),
    param('lr_inf', f'{NEW} --config.opt.lr=inf', r'opt.lr=inf must be a finite number'),
    param('decay_fraction_nan', f'{NEW} --config.opt.decay_fraction=nan',
          r'opt.decay_fraction=nan'),
    param('b1_above_one', f'{NEW} --config.opt.b1=2', r'opt.b1=2.0 must be in \[0, 1\)'),
    param('b2_nan', f'{NEW} --config.opt.b2=nan', r'opt.b2=nan must be a finite number'),
    param('eps_zero', f'{NEW} --config.opt.eps=0', r'opt.eps=0.0 must be > 0.0'),
    param('clip_norm_negative', f'{NEW} --config.opt.clip_norm=-1', r'opt.clip_norm=-1.0'),
    param('weight_decay_negative', f'{NEW} --config.opt.weight_decay=-1', r'opt.weight_decay=-1.0'),
    param('keep_every_negative', f'{NEW} --config.ckpt.keep_every=-1', r'ckpt.keep_every=-1'),
    param('schedule_unknown', f'{NEW} --config.opt.schedule=linear',
          r"opt.schedule='linear' is not one of"),
    param('decay_shape_unknown', f'{NEW} --config.opt.decay_shape=exp', r"opt.decay_shape='exp'"),
    param('optimizer_unknown', f'{NEW} --config.opt.name=sgdx', r"opt.name='sgdx'"),
    param('balance_weight_negative', f'{NEW} --config.moe.balance_loss_weight=-1',
          r'moe.balance_loss_weight'),
    param('z_loss_nan', f'{NEW} --config.moe.z_loss_weight=nan', r'moe.z_loss_weight=nan'),
    param('bias_rate_inf', f'{NEW} --config.moe.bias_update_rate=inf', r'moe.bias_update_rate=inf'),
    param('num_layers_zero', f'{NEW} --config.model.num_layers=0',
          r'model.num_layers=0 must be a positive integer'),
    param('d_model_zero', f'{NEW} --config.model.d_model=0', r'model.d_model=0 must be a positive integer'),
    param('head_dim_odd', f'{NEW} --config.model.head_dim=15', r'model.head_dim=15 must be even'),
    param('vocab_negative', f'{NEW} --config.model.vocab_size=-5', r'model.vocab_size=-5'),
    param('dtype_unknown', f'{NEW} --config.model.dtype=float8', r"model.dtype='float8'"),
    param('init_std_nan', f'{NEW} --config.model.init_std=nan',
          r'model.init_std=nan must be a finite number'),
    param('norm_eps_negative', f'{NEW} --config.model.norm_eps=-1', r'model.norm_eps'),
    param('rope_theta_inf', f'{NEW} --config.model.rope_theta=inf', r'model.rope_theta=inf'),
    param('experts_negative', f'{NEW} --config.moe.num_experts=-1',
          r'moe.num_experts=-1 must be a non-negative integer'),
    param('expert_d_ff_negative', f'{NEW} --config.moe.d_ff=-3', r'moe.d_ff=-3'),
    param('shared_experts_negative', f'{NEW} --config.moe.num_shared_experts=-1',
          r'moe.num_shared_experts=-1'),
    param('every_zero', f'{NEW} --config.moe.every=0', r'moe.every=0'),
    param('no_moe_layer_left', f'{NEW} --config.moe.first_dense=5', r'leave no MoE layer'),
    param('router_unknown', f'{NEW} --config.moe.router=hashy', r"moe.router='hashy'"),
    param('score_unknown', f'{NEW} --config.moe.score=relu', r"moe.score='relu'"),
    param('order_unknown', f'{NEW} --config.moe.order=random', r"moe.order='random'"),
    param('balance_scope_unknown', f'{NEW} --config.moe.balance_scope=batch',
          r"moe.balance_scope='batch'"),
    param('jitter_nan', f'{NEW} --config.moe.jitter=nan', r'moe.jitter=nan'),
    param('jitter_negative', f'{NEW} --config.moe.jitter=-1',
          r'moe.jitter=-1.0 must be in \[0, 1\)'),
    param('capacity_factor_nan', f'{NEW} {EINSUM} --config.moe.capacity_factor=nan',
          r'moe.capacity_factor=nan'),
    param('capacity_factor_zero', f'{NEW} {EINSUM} --config.moe.capacity_factor=0',
          r'moe.capacity_factor=0.0 must be > 0.0'),
    param('router_init_std_nan', f'{NEW} --config.moe.router_init_std=nan',
          r'moe.router_init_std=nan'),
    param('hash_seed_negative', f'{NEW} --config.moe.router=hash --config.moe.hash_seed=-1',
          r'moe.hash_seed=-1 must be a non-negative integer'),
    param('mesh_does_not_divide', f'{NEW} --config.mesh.data=3', r'do not divide the 8 devices'),
    param('mesh_too_many_devices', f'{NEW} --config.mesh.num_devices=100', r'mesh.num_devices=100'),
    param('mesh_rules_unknown_axis', f'{NEW} --config.mesh.rules=embed=bogus',
          r"mesh axes \['bogus'\]"),
    param('upcycle_factor_zero', f'{NEW} {GROW} --config.upcycle.factor=0',
          r'upcycle.factor=0 must be an integer >= 2'),
    param('upcycle_report_batches', f'{NEW} {GROW} --config.upcycle.report_batches=-1',
          r'upcycle.report_batches=-1'),
    param('upcycle_utility_batches',
          f'{NEW} {GROW} ' + "--config.upcycle.args={{'utility_batches':-1}}",
          r'upcycle.args.utility_batches=-1 must be a non-negative integer'),
    # Checked with no transition set too: config.json records nothing out of bounds.
    param('upcycle_factor_one_without_a_transition', f'{NEW} --config.upcycle.factor=1',
          r'upcycle.factor=1 must be an integer >= 2'),
    param('upcycle_seed_negative_without_a_transition', f'{NEW} --config.upcycle.seed=-1',
          r'upcycle.seed=-1 must be a non-negative integer'),
    # Data.
    param('text_files_without_patterns', f'{NEW} --config.data.source=text_files',
          r'data.patterns is empty'),
    param('patterns_match_nothing', f'{NEW} --config.data.source=text_files '
          '--config.data.patterns={tmp}/none*.txt',
          r"data.patterns: '.*none\*.txt' matches no files"),
    param('patterns_all_empty', f'{NEW} --config.data.source=text_files '
          '--config.data.patterns={tmp}/corpus/*.txt', r'are all empty',
          _texts('a.txt', '', 'b.txt', '')),
    param('encoding_unknown', f'{NEW} --config.data.source=text_files '
          '--config.data.patterns={tmp}/corpus/*.txt --config.data.encoding=klingon',
          r"data.encoding='klingon' is not a known text encoding",
          _texts('a.txt', 'x', 'b.txt', 'y')),
    param('encoding_wrong_for_a_file', f'{NEW} --config.data.source=text_files '
          '--config.data.patterns={tmp}/corpus/*.txt --config.data.encoding=utf-8',
          r'b.txt: not valid utf-8', _texts('a.txt', 'ok', 'b.txt', 'caf\xe9'.encode('latin-1'))),
    param('a_file_of_nul_bytes', f'{NEW} --config.data.source=text_files '
          '--config.data.patterns={tmp}/corpus/*.txt',
          r'data.patterns: .*/corpus/b.txt holds NUL characters \(the first at 0\): not text',
          _texts('a.txt', 'ok', 'b.txt', bytes(4096), 'c.txt', 'fine')),
    param('one_document', f'{NEW} --config.data.source=text_files '
          '--config.data.patterns={tmp}/corpus/*.txt', r'at least 2', _texts('a.txt', 'only')),
    param('val_fraction', f'{NEW} --config.data.val_fraction=1.5', r'data.val_fraction=1.5'),
    param('source_unknown', f'{NEW} --config.data.source=books', r"data.source='books'"),
    param('tokenizer_unknown', f'{NEW} --config.data.tokenizer=sp', r"data.tokenizer='sp'"),
    param('bpe_vocab_too_small',
          f'{NEW} --config.data.tokenizer=bpe --config.data.bpe_vocab_size=100',
          r'data.bpe_vocab_size=100 must be at least 260'),
    param('tokenizer_path_missing', f'{NEW} --config.data.tokenizer=bpe '
          '--config.data.tokenizer_path={tmp}/tok.json', r'data.tokenizer_path: .*tok.json'),
    param('tokenizer_path_not_json', f'{NEW} --config.data.tokenizer=bpe '
          '--config.data.tokenizer_path={tmp}/tok.json', r'cannot read .*tok.json',
          _file('tok.json', '{not json')),
    # The workdir path.
    param('workdir_empty', f'{MOE} --workdir=', r'workdir is empty'),
    param('workdir_is_a_file', f'{MOE} --workdir={{tmp}}/f', r'workdir .*/f is not a directory',
          _file('f', 'x')),
    param('workdir_under_a_file', f'{MOE} --workdir={{tmp}}/f/run',
          r'workdir .*/f/run lies under .*/f, which is not a directory', _file('f', 'x')),
    param('workdir_checkpoints_is_a_file', RESUME, r'checkpoints is not a directory',
          lambda p: (damage.remove(p['copy'], 'checkpoints'),
                     damage.write(p['copy'], 'checkpoints', 'x'))),
    # The workdir's own files.
    param('workdir_of_another_shape', f'{RESUME} --config.model.d_model=64',
          r'model.d_model: workdir 32 vs requested 64'),
    param('workdir_of_another_stream', f'{RESUME} --config.seed=1',
          r'another data stream \(seed: workdir 0 vs requested 1'),
    param('config_json_malformed', RESUME, r'config.json: not JSON',
          _copy(damage.write, 'config.json', '{"model": ')),
    param('config_json_empty', RESUME, r'config.json: not JSON',
          _copy(damage.write, 'config.json', '')),
    param('config_json_a_list', RESUME, r'config.json: expected a JSON object, got list',
          _copy(damage.write, 'config.json', '[]')),
    param('config_json_not_utf8', RESUME, r'config.json: cannot read',
          _copy(damage.write, 'config.json', b'{"a": "\xff"}')),
    param('run_json_malformed', RESUME, r'run.json: not JSON',
          _copy(damage.write, 'run.json', '{')),
    param('lineage_json_malformed', RESUME, r'lineage.json: not JSON',
          _copy(damage.write, 'lineage.json', '{')),
    param('lineage_json_without_stages', RESUME,
          r'lineage.json: expected "stages", a non-empty list',
          _copy(damage.write, 'lineage.json', '{"format": 1}')),
    param('lineage_json_stage_without_model', RESUME, r"lineage.json: stage 0 lacks 'model'",
          _json('lineage.json', lambda r: r['stages'][0].pop('model'))),
    # Bug 1: without config.json only the checkpoint knows the shape; the
    # refusal must not write the requested config (tests/robustness/test_faults.py
    # then runs the correct command).
    param('checkpoint_of_another_shape', f'{RESUME} --config.model.d_model=64',
          r'checkpoints/2 params does not match the config: .*embedding.*\(259, 32\) vs config '
          r'\(259, 64\)', _copy(damage.remove, 'config.json')),
    param('resume_with_another_worker_count', f'{RESUME} --config.data.worker_count=1',
          r'checkpoints/2: its data iterator state was saved with another data.worker_count; '
          r'resume with --config.data.worker_count=0'),
    # Every checkpoint damaged: no step to fall back to.
    param('every_checkpoint_damaged', RESUME,
          r'no intact checkpoint to resume in .*checkpoints/2 is incomplete: no params; .*'
          r'checkpoints/1 is incomplete: no params',
          lambda p: [damage.remove(p['copy'], f'checkpoints/{s}/params') for s in (1, 2)]),
] + [
    # An item a step was saved with, gone: never resumed with a fresh optimizer
    # or from the data stream's start (issue 70, item 11).
    param(f'every_checkpoint_without_its_{item}', RESUME,
          rf'no intact checkpoint to resume in .*checkpoints/2 is incomplete: its {item} was '
          rf'saved and is gone; .*checkpoints/1 is incomplete: its {item}',
          lambda p, item=item: [damage.remove(p['copy'], f'checkpoints/{s}/{item}')
                                for s in (1, 2)])
    for item in ('opt_state', 'data')
]


@pytest.mark.parametrize('row', ROWS)
def test_main_refuses_bad_input(cli, trained, tmp_path, row):
  rows.check(cli, 'moe_jax.main', row, tmp_path, trained)


def test_main_refuses_a_read_only_workdir(cli, tmp_path, read_only_dir):
  before = harness.tree_digest(tmp_path)
  result = cli.run('moe_jax.main', *MOE.format(configs=harness.CONFIGS).split(),
                   f'--workdir={read_only_dir}/run', cwd=tmp_path)
  harness.assert_one_error_line(result, 2, r'workdir .*/run: .* is not writable')
  assert harness.tree_digest(tmp_path) == before
