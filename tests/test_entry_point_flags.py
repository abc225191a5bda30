"""Entry points define their absl flags only when run as programs (under
`if __name__ == '__main__'`), so a process (a notebook, a test) can import
any two of them without a duplicate-flag error. The entry points are found
(tests/commands.py), not listed."""
import json
import subprocess
import sys

from tests import commands
from tests.robustness import harness

# Commands this test does not import, each for its reason.
EXCLUDED = {
    'moe_jax.plan_memory': 'the program of `plan --memory`: plan imports it only to run it, '
                           'and it defines its flags on import',
    'moe_jax.multiprocess': 'a launcher that defines its flags on import; only the multihost '
                            'benchmark (an argparse program) imports it',
    'experiments.bench.prepare_bench': 'a benchmark, only ever run as a program; it defines its '
                                       'flags on import',
    'experiments.bench.triton_compile': 'exits on import without triton, which only a GPU '
                                        'machine has',
}
MODULES = tuple(m for m in commands.find() if m not in EXCLUDED)


def test_every_exclusion_is_a_command():
  assert set(EXCLUDED) <= set(commands.find())


def test_entry_points_import_together_and_define_no_flags():
  code = ('import importlib, json\nfrom absl import flags\n'
          f'for m in {MODULES!r}:\n'
          '  importlib.import_module(m)\n'
          'print(json.dumps(sorted(m for m, defined in flags.FLAGS.flags_by_module_dict().items()'
          ' if defined)))\n')
  proc = subprocess.run([sys.executable, '-c', code], cwd=harness.REPO, env=harness.env(),
                        capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  # Libraries' own flags only (absl, grain, orbax, ...): no command's.
  owners = json.loads(proc.stdout.strip().splitlines()[-1])
  assert not [m for m in owners if m.split('.')[0] in ('moe_jax', 'experiments')], owners
