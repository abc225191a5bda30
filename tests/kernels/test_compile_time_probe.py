"""The compile-time bench's stacked-layout probe compiles both layouts on a
tiny model (its timings are not checked: not a timed test)."""
from configs import common
from experiments.bench import compile_time


def test_probe_compiles_both_layouts():
  config = common.base()
  common.apply_preset(config, 'tiny')
  config.model.update(num_layers=3, scan_layers=True, vocab_size=64)
  config.update(batch_size=8, seq_len=8)
  columns = compile_time._columns(compile_time.program_lib.build(  # pylint: disable=protected-access
      config, compile_time.placement.make_mesh(config.mesh)).model.cfg)
  assert sorted(n for _, names in columns for n in names) == ['layers_0', 'layers_1', 'layers_2']
  for stacked in (False, True):
    row = compile_time.probe(config, stacked)
    assert row['probe'] == ('stacked' if stacked else 'layers')
    assert row['compile_cpu_s'] > 0
