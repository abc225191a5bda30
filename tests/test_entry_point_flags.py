"""Entry points define their absl flags only when run as programs
(define_flags() under `if __name__ == '__main__'`), so a process (a notebook,
a test) can import any two of them without a duplicate-flag error."""
import json
import subprocess
import sys

from tests.robustness import harness

MODULES = ('moe_jax.evaluate', 'moe_jax.main', 'moe_jax.interop.import_hf',
           'moe_jax.interop.export_hf', 'moe_jax.data.sft_mix', 'experiments.run',
           'experiments.moesturizer.table', 'moe_jax.plan', 'moe_jax.lineage', 'moe_jax.generate',
           'moe_jax.inspect', 'moe_jax.data.prepare', 'experiments.moesturizer.letter_probe')


def test_entry_points_import_together_and_define_no_flags():
  code = ('import importlib, json, sys\nfrom absl import flags\nbefore = set(flags.FLAGS)\n'
          f'for m in {MODULES!r}:\n'
          '  importlib.import_module(m)\n'
          '  assert hasattr(sys.modules[m], "define_flags"), m\n'
          'print(json.dumps(sorted(set(flags.FLAGS) - before)))\n')
  proc = subprocess.run([sys.executable, '-c', code], cwd=harness.REPO, env=harness.env(),
                        capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  # absl's own flags only: no entry point's (ckpt, config, workdir, out, ...).
  defined = json.loads(proc.stdout.strip().splitlines()[-1])
  assert not {'ckpt', 'config', 'workdir', 'out', 'src', 'run', 'budget'} & set(defined), defined
