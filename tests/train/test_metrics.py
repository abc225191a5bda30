"""metrics.jsonl on resume: whole lines up to the resumed step, nothing torn."""
from moe_jax.train import metrics


def test_kept_lines_drop_torn_and_later_lines():
  data = (b'{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.5}\n{"step": 3, "loss": 2.0}\n'
          b'{"step": 4, "lo')
  assert metrics.kept_lines(data, 2) == ['{"step": 1, "loss": 3.0}\n',
                                         '{"step": 2, "loss": 2.5}\n']
  # A last line complete but for its newline gets one; garbage is dropped.
  assert metrics.kept_lines(b'{"step": 1}\n\xff\xfe\n[1]\n{"step": 2}', 5) == [
      '{"step": 1}\n', '{"step": 2}\n']
