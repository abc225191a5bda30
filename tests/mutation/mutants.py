"""The one-line mutants tests/mutation/run.py plants: each a plausible real
bug of one class of issue 75 (the classes a reviewer's planted mutants showed
surviving), with the tests that must catch it. `old` occurs exactly once in
`file`; a mutant whose `old` moved is reported stale, not skipped silently.
"""
from typing import NamedTuple


class Mutant(NamedTuple):
  name: str
  bug: str      # the class of bug, in words
  file: str
  old: str
  new: str
  tests: tuple  # pytest node ids or files


_TAU = ('tests/train/test_transition_at_tau.py',)
_ARGS = ('tests/upcycle/test_recipe_args_precedence.py',)
_MERGE = 'tests/upcycle/test_merge_sources.py'
_BOUNDS = ('tests/test_config_bounds.py',)
_OLD = ('tests/workdir/test_old_workdir.py',)
_STREAM = ('tests/data/test_stream_keys.py',)
_LINKS = ('tests/workdir/test_dangling_links.py',)
_LAUNCHER = ('tests/multihost/test_launcher_bounds.py',)
_FUSED = ('tests/train/test_fused_loss_path.py',)
_CUDNN = ('tests/models/test_attention_cudnn.py::test_the_widest_head_is_taken_and_one_step_'
          'wider_refused',)

MUTANTS = [
    Mutant('config_at_late', 'the in-run transition one step late: config_at',
           'moe_jax/upcycle/transition.py',
           'target_config(config) if tau and step >= tau else config',
           'target_config(config) if tau and step > tau else config', _TAU),
    Mutant('restore_late', 'the in-run transition one step late: resuming at tau',
           'moe_jax/train/trainer.py', '      if tau and step >= tau:',
           '      if tau and step > tau:', _TAU),
    Mutant('grow_late', 'the in-run transition one step late: the training loop',
           'moe_jax/train/trainer.py', 'bool(tau) and done == tau\n',
           'bool(tau) and done == tau + 1\n', _TAU),
    Mutant('group_overwrites_args', 'upcycle.factor overwrites the factor a recipe was given',
           'moe_jax/upcycle/recipes/__init__.py', "given.setdefault('factor', factor)",
           "given['factor'] = factor", _ARGS),
    Mutant('report_of_source_0', "each source's report built from source 0's params",
           'moe_jax/upcycle/transition.py',
           'preservation_report(source.config, dst_config, source.params, params, batches)',
           'preservation_report(source.config, dst_config, inputs[0].params, params, batches)',
           (f'{_MERGE}::test_each_source_report_is_of_its_own_params_and_batches',)),
    Mutant('param_keys_intersection', "merge's check: the intersection of the param paths",
           'moe_jax/upcycle/sources.py', 'sorted(set(flat_a) | set(flat_b))',
           'sorted(set(flat_a) & set(flat_b))',
           (f'{_MERGE}::test_a_param_leaf_only_one_source_has_is_named',)),
    Mutant('tokenizer_files_intersection', "merge's check: the intersection of tokenizer files",
           'moe_jax/upcycle/sources.py', 'sorted(set(ta) | set(tb))', 'sorted(set(ta) & set(tb))',
           (f'{_MERGE}::test_a_tokenizer_file_only_one_source_has_is_a_difference',)),
    Mutant('at_least_exclusive', 'a config bound at itself: at_least refuses its bound',
           'moe_jax/schema/field.py', "'>=': operator.ge", "'>=': operator.gt", _BOUNDS),
    Mutant('at_most_exclusive', 'a config bound at itself: at_most refuses its bound',
           'moe_jax/schema/field.py', "'<=': operator.le", "'<=': operator.lt", _BOUNDS),
    Mutant('above_inclusive', 'a config bound at itself: above takes its bound',
           'moe_jax/schema/field.py', "'>': operator.gt", "'>': operator.ge", _BOUNDS),
    Mutant('below_inclusive', 'a config bound at itself: below takes its bound',
           'moe_jax/schema/field.py', "'<': operator.lt", "'<': operator.le", _BOUNDS),
    Mutant('added_report_batches', "an old workdir's value changed: upcycle.report_batches",
           'moe_jax/schema/upcycle.py', "field(4, at_least=0, added=4)",
           "field(4, at_least=0, added=3)", _OLD),
    Mutant('moved_split_bias', "an old run's split_bias lost where it moved into upcycle.args",
           'moe_jax/schema/upcycle.py', "'split_bias': False}", "'split_bias': True}", _OLD),
    Mutant('added_cross_entropy', "an old workdir's value changed: model.cross_entropy",
           'moe_jax/schema/model.py', "choices=CROSS_ENTROPIES, added='reference'",
           "choices=CROSS_ENTROPIES, added='fused'", _OLD),
    Mutant('stream_without_split_seed', 'a key dropped from the stream keys: data.split_seed',
           'moe_jax/schema/data.py', "split_seed: int = field(0, stream=True)",
           "split_seed: int = field(0)", _STREAM),
    Mutant('stream_without_encoding', "a key dropped from a source's stream keys: data.encoding",
           'moe_jax/data/sources/text_files.py', "keys = ('data.patterns', 'data.encoding')",
           "keys = ('data.patterns',)", _STREAM),
    Mutant('output_file_follows_link', 'containment follows a dangling link: output_file',
           'moe_jax/containment.py', 'if os.path.lexists(resolved) and not overwrite:',
           'if os.path.exists(resolved) and not overwrite:', _LINKS),
    Mutant('staging_follows_link', 'containment follows a dangling link: a staged --dst',
           'moe_jax/workdir/staging.py', 'if os.path.lexists(dst) and not overwrite:',
           'if os.path.exists(dst) and not overwrite:', _LINKS),
    Mutant('workdir_follows_link', 'a dangling link taken for a missing workdir',
           'moe_jax/workdir/files.py', '  if os.path.lexists(path):\n',
           '  if os.path.exists(path):\n', _LINKS),
    Mutant('launcher_bound_high', "the launcher's process bound off by one (MAX_PROCESSES refused)",
           'moe_jax/multiprocess.py', 'if not 1 <= processes <= MAX_PROCESSES:',
           'if not 1 <= processes < MAX_PROCESSES:', _LAUNCHER),
    Mutant('launcher_bound_low', "the launcher's process bound off by one (0 processes taken)",
           'moe_jax/multiprocess.py', 'if not 1 <= processes <= MAX_PROCESSES:',
           'if not 0 <= processes <= MAX_PROCESSES:', _LAUNCHER),
    Mutant('launcher_exit_0_fails', "the launcher's exit-code test takes code 0 for a failure",
           'moe_jax/multiprocess.py', 'enumerate(codes) if code), None)',
           'enumerate(codes) if code is not None), None)', _LAUNCHER),
    Mutant('fused_dropped_whole', 'the fused loss not used by the step (one batch, no chunks)',
           'moe_jax/train/accumulate.py', "batch['loss_mask'], cfg.cross_entropy)",
           "batch['loss_mask'])", _FUSED),
    Mutant('fused_dropped_chunked', 'the fused loss not used by the chunked loss',
           'moe_jax/train/accumulate.py', 'cfg.loss_chunk, cfg.cross_entropy)',
           'cfg.loss_chunk)', _FUSED),
    Mutant('fused_never_taken', "the fused loss' branch never taken (the reference runs)",
           'moe_jax/models/losses.py', "  if impl == 'fused':", "  if impl == 'fused_ce':",
           _FUSED),
    Mutant('cudnn_head_limit', "cuDNN attention's head-dim limit off by one at the limit",
           'moe_jax/kernels/attention_cudnn.py', 'head_dim > max_head', 'head_dim >= max_head',
           _CUDNN),
    Mutant('cudnn_hopper_limit', "cuDNN's 256 limit from Hopper on, off by one major version",
           'moe_jax/kernels/attention_cudnn.py', 'major >= 9', 'major > 9', _CUDNN),
    Mutant('provenance_x86_only', "provenance ignores an Arm CPU's Features line",
           'experiments/provenance.py', "field('flags', 'Features')", "field('flags')",
           ('tests/experiments/test_provenance.py',)),
    Mutant('largest_drift_signed', 'the rerun\'s "largest drift" misses a large negative one',
           'experiments/rerun.py', "max_abs_drift=max(abs(r['drift']) for r in rows)",
           "max_abs_drift=max(r['drift'] for r in rows)",
           ('tests/experiments/test_rerun.py::test_the_largest_drift_is_the_largest_in_size_'
            'whatever_its_sign',)),
]
