"""An imported checkpoint is a workdir like any other: evaluate, upcycle
(dense_to_moe stays exact with Qwen3's q/k norms), export back, train on with
init_from, all with the checkpoint's own tokenizer."""
import json
import os
import shutil

import numpy as np
import pytest

from configs import finetune
from configs.upcycle import dense_to_moe
from moe_jax.data import corpus, pipeline
from moe_jax.errors import ConfigError
from moe_jax.eval import validation
from moe_jax.interop import exporter, importer, safetensors_io
from moe_jax.models import losses
from moe_jax.train import trainer
from moe_jax.upcycle import run
from moe_jax.workdir import checkpoint, digest, lineage
from tests.interop import fixtures


@pytest.fixture(scope='module')
def imported(tmp_path_factory):
  """The Qwen3 fixture imported, with a small corpus (20 slices of a play) as its data."""
  root = tmp_path_factory.mktemp('import')
  play = corpus.shakespeare()[0].text
  for i in range(20):
    (root / f'doc{i:02d}.txt').write_text(play[i * 2000:(i + 1) * 2000])
  config = fixtures.base_config()
  config.data.update(source='text_files', patterns=str(root / '*.txt'), val_fraction=0.1)
  workdir = str(root / 'qwen3')
  summary = importer.import_checkpoint(fixtures.path('qwen3_qk_norm'), workdir, config)
  assert summary['arch'] == 'qwen3' and summary['tokenizer_vocab'] == 280
  return workdir


def test_the_workdir_holds_the_checkpoints_tokenizer(imported):
  assert sorted(os.listdir(imported)) == ['checkpoints', 'config.json', 'lineage.json',
                                          'tokenizer.json', 'tokenizer_config.json']
  (root,) = lineage.read(imported)['stages']
  assert root['origin']['how'] == 'hf_import' and root['tokens_before'] is None
  assert root['origin']['parent']['sha256'] == digest.file_digest(
      fixtures.path('qwen3_qk_norm'))
  config = checkpoint.workdir_config(imported)
  assert config.data.tokenizer == 'bpe' and config.model.qk_norm
  tok = pipeline.tokenizer_for(config, imported, train=False)
  vocab = tok.tok.get_vocab()
  # Its own special tokens (tokenizer_config.json), not our byte ids.
  assert (tok.bos_id, tok.eos_id, tok.pad_id) == (None, vocab['<|im_end|>'], vocab['<|im_end|>'])
  assert '<|im_start|>' in tok.chat_template


def test_upcycle_export_and_train_on(imported, tmp_path):
  before = validation.evaluate_checkpoint(imported)
  moe = str(tmp_path / 'moe')
  # No selection bias: Qwen3-MoE, the export's target, has no word for one.
  report = run.upcycle_checkpoint(dense_to_moe.get_config('experts=4,top_k=2,bias=False'),
                                  imported, moe)
  assert report['max_abs_dlogits'] < 1e-5
  assert report['loss_after'] == pytest.approx(report['loss_before'], abs=1e-5)
  assert validation.evaluate_checkpoint(moe)['val_loss'] == pytest.approx(before['val_loss'],
                                                                           abs=1e-5)
  with open(os.path.join(moe, 'tokenizer_config.json')) as f:
    assert json.load(f)['eos_token'] == '<|im_end|>'

  # Exported (auto: Qwen3-MoE): the fixture's tensors, each expert a copy of its MLP.
  out = str(tmp_path / 'hf')
  assert exporter.export_checkpoint(moe, out)['arch'] == 'qwen3_moe'
  with open(os.path.join(out, exporter.CARD_FILE)) as f:
    card = f.read()
  # The card's lineage: imported from the fixture, then upcycled dense -> MoE.
  assert '- qwen3_moe' in card and '## Lineage' in card
  assert 'import ' in card and 'upcycle CLI dense_to_moe' in card, card
  _, dense = safetensors_io.read_dir(fixtures.path('qwen3_qk_norm'))
  _, tensors = safetensors_io.read_dir(out)
  for name, w in dense.items():
    copies = ([name.replace('mlp.', f'mlp.experts.{e}.') for e in range(4)] if '.mlp.' in name
              else [name])
    for copy in copies:
      np.testing.assert_array_equal(tensors[copy], np.asarray(w, np.float32), err_msg=copy)
  with pytest.raises(ConfigError, match='--out=.* exists'):
    exporter.export_checkpoint(moe, out)
  with pytest.raises(ConfigError, match='model.qk_norm=True has no equivalent in Mixtral'):
    exporter.export_checkpoint(moe, str(tmp_path / 'mixtral'), 'mixtral')
  assert not os.path.exists(tmp_path / 'mixtral')

  # Training on from the imported params (configs/finetune.py): the first
  # logged loss is the imported model's loss on the first training batch.
  config = finetune.get_config(f'ckpt={imported},steps=2')
  config.update(log_every_steps=1, eval_every_steps=0)
  config.ckpt.async_save = False
  trainer.train_and_evaluate(config, str(tmp_path / 'ft'))
  with open(tmp_path / 'ft' / 'metrics.jsonl') as f:
    first = json.loads(f.readline())
  batch = next(pipeline.train_iterator(config, pipeline.tokenizer_for(config, None)))
  dense_config, params, _, _, _ = importer.convert(fixtures.path('qwen3_qk_norm'), config)
  logits = fixtures.logits(dense_config, params, batch['inputs'], batch)
  want, _ = losses.cross_entropy(logits, batch['targets'], batch['loss_mask'])
  assert first['loss'] == pytest.approx(float(want), abs=1e-4)


@pytest.mark.parametrize('saved, want', [('ragged', 'auto'), ('grouped', 'auto'),
                                         ('einsum', 'einsum')])
def test_finetune_runs_this_platforms_dispatch_path(imported, tmp_path, saved, want):
  """config.json names the path that ran at the source; a dropless one is
  'auto' again (on CPU: grouped, not ragged_dot's dense fallback)."""
  source = tmp_path / 'source'
  shutil.copytree(imported, source)
  with open(source / 'config.json') as f:
    config = json.load(f)
  config['moe']['dispatch'] = saved
  (source / 'config.json').write_text(json.dumps(config))
  assert finetune.get_config(f'ckpt={source}').moe.dispatch == want
