"""runner._resume: what a resume_from child takes from its parent."""
import json
import os

from experiments import runner


def test_resume_copies_the_step_and_the_parents_source_record(tmp_path):
  parent, child = tmp_path / 'up', tmp_path / 'branch'
  (parent / 'checkpoints' / '20' / 'params').mkdir(parents=True)
  (parent / 'checkpoints' / '20' / 'params' / 'data').write_text('w')
  (parent / 'checkpoints' / '40').mkdir()
  record = {'total_steps': 200, 'source': {'step': 50, 'tokens': 51200}}
  (parent / 'run.json').write_text(json.dumps(record))
  child.mkdir()
  runner._resume(str(parent / 'checkpoints' / '20'), str(child))
  assert os.listdir(child / 'checkpoints') == ['20']
  assert (child / 'checkpoints' / '20' / 'params' / 'data').read_text() == 'w'
  # The trainer keeps this `source`: collect reads the branch's D1 from it.
  assert json.loads((child / 'run.json').read_text()) == record
  assert not (child / 'tokenizer.json').exists() and not (child / '.upcycle').exists()
