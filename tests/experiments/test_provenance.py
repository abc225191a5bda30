"""experiments.provenance: the record every results file carries."""
import os

from experiments import provenance
from tests.experiments import runs


def test_the_cpu_model_and_its_vector_extensions_come_from_cpuinfo(tmp_path):
  info = tmp_path / 'cpuinfo'
  info.write_text('processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: fpu sse4_2 avx avx2 fma\n'
                  'processor\t: 1\nmodel name\t: Some CPU 9000\nflags\t\t: fpu sse4_2 avx avx2 fma\n')
  assert provenance.cpu(str(info)) == ('Some CPU 9000', ['avx2', 'fma', 'avx', 'sse4_2'])


def test_a_record_has_every_key_and_names_a_module_not_a_path(monkeypatch):
  monkeypatch.setenv('XLA_FLAGS', '--xla_cpu_max_isa=AVX2')
  got = provenance.record([os.path.join(runs.REPO, 'experiments', 'rerun.py'), '--runs=1'])
  assert provenance.missing({'provenance': got}) == [] and got['xla_flags'] == '--xla_cpu_max_isa=AVX2'
  assert got['command'] == 'python -m experiments.rerun --runs=1'
  assert provenance.missing({'provenance': {'commit': 'x'}}) == list(provenance.KEYS[1:])


def test_an_arm_cpu_lists_its_extensions_from_its_features_line(tmp_path):
  """Arm's /proc/cpuinfo has `Features` where x86 has `flags`, and no model
  name line on most kernels."""
  info = tmp_path / 'cpuinfo'
  info.write_text('processor\t: 0\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull '
                  'sha1 sha2 crc32 atomics fphp asimdhp cpuid sve\nCPU implementer\t: 0x41\n'
                  'CPU part\t: 0xd40\n')
  assert provenance.cpu(str(info)) == ('', ['sve', 'asimd'])
