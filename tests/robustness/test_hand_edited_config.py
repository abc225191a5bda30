"""A hand-edited config.json (a key deleted, a number written as a string,
a null, 64.0 for a count) is one `error:` line naming the file and the key,
at load, in every command that reads a workdir's config (main, evaluate,
generate, upcycle), and nothing is written."""
import pytest

from tests.robustness import damage, rows
from tests.robustness.rows import param

# Each command, and its arguments over the damaged copy {copy}.
_COMMANDS = {
    'main': ('moe_jax.main', '--workdir={copy}'),
    'evaluate': ('moe_jax.evaluate', '--ckpt={copy}'),
    'generate': ('moe_jax.generate', '--ckpt={copy} --prompt=a'),
    'upcycle': ('moe_jax.upcycle',
                '--config={configs}/upcycle/expand_experts.py --src={copy} --dst={tmp}/x'),
}


def _delete(group, key):
  return lambda r: r[group].pop(key)


def _set(group, key, value):
  return lambda r: r[group].update({key: value})


# (id, edit of the record, what the error says after 'config.json: ').
_EDITS = [
    ('key_missing', _delete('moe', 'top_k'), r"no key 'moe.top_k' \(its default: 2\)"),
    ('int_as_a_string', _set('moe', 'top_k', '2'),
     r"moe.top_k='2' must be an integer, not str"),
    ('null', _set('model', 'num_layers', None), r'model.num_layers=None must be an integer, '
     r'not null'),
    ('integral_float_for_an_int', _set('model', 'd_model', 64.0),
     r'model.d_model=64.0 must be an integer, not float'),
]

ROWS = [param(f'{command}_{edit_id}', args.split(), rf'/copy/config.json: {pattern}',
              lambda p, edit=edit: damage.edit_json(p['copy'], 'config.json', edit), module=module)
        for command, (module, args) in _COMMANDS.items() for edit_id, edit, pattern in _EDITS]

# Every type a field has: a bool, a float, a string, and a top-level key.
ROWS += [
    param('bool_as_a_string', '--ckpt={copy}', r"ckpt.async_save='false' must be true or false",
          lambda p: damage.edit_json(p['copy'], 'config.json', _set('ckpt', 'async_save',
                                                                     'false')),
          module='moe_jax.evaluate'),
    param('float_as_a_bool', '--ckpt={copy}', r'moe.capacity_factor=True must be a number, not bool',
          lambda p: damage.edit_json(p['copy'], 'config.json', _set('moe', 'capacity_factor',
                                                                     True)),
          module='moe_jax.evaluate'),
    param('string_as_a_number', '--ckpt={copy}', r'data.tokenizer=3 must be a string, not int',
          lambda p: damage.edit_json(p['copy'], 'config.json', _set('data', 'tokenizer', 3)),
          module='moe_jax.evaluate'),
    # The groups above workdir/ too (one table of groups: moe_jax/schema/).
    param('opt_float_as_a_string', '--ckpt={copy}', r"opt.lr='x' must be a number, not str",
          lambda p: damage.edit_json(p['copy'], 'config.json', _set('opt', 'lr', 'x')),
          module='moe_jax.evaluate'),
    param('upcycle_float_for_an_int', '--workdir={copy}',
          r'upcycle.factor=2.5 must be an integer, not float',
          lambda p: damage.edit_json(p['copy'], 'config.json', _set('upcycle', 'factor', 2.5)),
          module='moe_jax.main'),
    param('top_level_key_missing', '--workdir={copy}', r"no key 'log_every_steps'",
          lambda p: damage.edit_json(p['copy'], 'config.json', lambda r: r.pop('log_every_steps')),
          module='moe_jax.main'),
]


def _in_run(**upcycle):
  """An in-run transition at step 3 added to the 2-step run (continued to 4)."""
  return lambda p: damage.edit_json(p['copy'], 'config.json', lambda r: r['upcycle'].update(
      step=3, recipe='expand_experts', **upcycle))


# The in-run transition's own dicts: what it grows to, and a heuristic's options.
ROWS += [
    param('in_run_target_of_another_type', '--workdir={copy} --config.total_steps=4',
          r"upcycle.target.moe.top_k='x' must be of the type of moe.top_k \(int\)",
          _in_run(target={'moe': {'top_k': 'x'}}), module='moe_jax.main'),
    param('in_run_heuristic_option_of_another_type', '--workdir={copy} --config.total_steps=4',
          r"upcycle.args.expert_args.lam='big' must be a number",
          _in_run(args={'delta': 0.0, 'expert_heuristic': 'copy_noise',
                        'expert_args': {'lam': 'big'}}),
          module='moe_jax.main'),
    param('in_run_option_against_the_grown_config', '--workdir={copy} --config.total_steps=4',
          r'upcycle.args.delta=0.001 perturbs router biases .* but moe.use_bias=False',
          _in_run(args={}), module='moe_jax.main'),
]


@pytest.mark.parametrize('row', ROWS)
def test_a_hand_edited_config_is_named_at_load(cli, trained, tmp_path, row):
  rows.check(cli, row.module, row, tmp_path, trained)
