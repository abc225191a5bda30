"""`import_hf` and `export_hf` over bad inputs: a destination inside, equal
to or above the source (directly or through links, with or without
--overwrite), nonsense weights and configs, malformed safetensors and GGUF
files. Each exits 2 with one `error:` line and changes nothing: the source
(a private copy, inside the row's directory) hashes the same."""
import json
import os
import shutil
import struct

import numpy as np
import pytest

from moe_jax.interop import safetensors_io
from tests.interop import fixtures
from tests.robustness import damage, rows
from tests.robustness.rows import param

IMPORT, EXPORT = 'moe_jax.interop.import_hf', 'moe_jax.interop.export_hf'
SRC = 'llama_tied_mha'


def _src(edit=None):
  """A copy of a tiny transformers checkpoint at {tmp}/src, then `edit(dir)`."""
  def setup(p):
    d = os.path.join(p['tmp'], 'src')
    shutil.copytree(fixtures.path(SRC), d)
    if edit:
      edit(d)
  return setup


def _link(name, target):
  return lambda p: os.symlink(target.format(**p), os.path.join(p['tmp'], name))


def _both(*setups):
  def setup(p):
    for s in setups:
      s(p)
  return setup


def _config(**changes):
  def edit(d):
    with open(os.path.join(d, 'config.json')) as f:
      config = json.load(f)
    config.update(changes)
    with open(os.path.join(d, 'config.json'), 'w') as f:
      json.dump(config, f)
  return edit


def _nan_weight(d):
  path = os.path.join(d, safetensors_io.SINGLE)
  tensors = {k: np.array(v) for k, v in safetensors_io.read_file(path).items()}
  name = sorted(tensors)[0]
  tensors[name].reshape(-1)[3] = np.nan
  safetensors_io.write_file(path, tensors)


def _header(d, header):
  blob = json.dumps(header).encode()
  with open(os.path.join(d, safetensors_io.SINGLE), 'wb') as f:
    f.write(struct.pack('<Q', len(blob)) + blob)


def _index(target):
  """The checkpoint sharded by an index whose one entry names `target`."""
  def edit(d):
    names = safetensors_io.read_file(os.path.join(d, safetensors_io.SINGLE))
    with open(os.path.join(d, safetensors_io.INDEX), 'w') as f:
      json.dump(dict(weight_map={n: target for n in names}), f)
  return edit


def _gguf(blob):
  return lambda p: damage.write(p['tmp'], 'm.gguf', blob)


_GGUF_HEAD = b'GGUF' + struct.pack('<I', 3)
# 40 bytes: one tensor, one key/value whose 100-byte key is cut after 8.
GGUF_CUT = _GGUF_HEAD + struct.pack('<QQQ', 1, 1, 100) + b'general.'
GGUF_HUGE_COUNT = _GGUF_HEAD + struct.pack('<QQ', 2 ** 60, 0)

ROWS = [
    # import_hf: --workdir against --src, with and without --overwrite.
    param('import_workdir_is_src', f'--src={{tmp}}/src --workdir={{tmp}}/src --overwrite',
          r'--workdir=.*/src \(.*\) must lie outside --src', _src(), module=IMPORT),
    param('import_workdir_above_src', f'--src={{tmp}}/src --workdir={{tmp}} --overwrite',
          r'must lie outside --src', _src(), module=IMPORT),
    param('import_workdir_inside_src', f'--src={{tmp}}/src --workdir={{tmp}}/src/inner',
          r'must lie outside --src', _src(), module=IMPORT),
    param('import_workdir_a_link_to_src', f'--src={{tmp}}/src --workdir={{tmp}}/l --overwrite',
          r'must lie outside --src', _both(_src(), _link('l', '{tmp}/src')), module=IMPORT),
    param('import_workdir_under_a_link_to_src', f'--src={{tmp}}/src --workdir={{tmp}}/l/x',
          r'must lie outside --src', _both(_src(), _link('l', '{tmp}/src')), module=IMPORT),
    param('import_gguf_workdir_is_the_file', f'--src={{tmp}}/m.gguf --workdir={{tmp}}/m.gguf '
          '--overwrite', r'must lie outside --src', _gguf(GGUF_CUT), module=IMPORT),
    # import_hf: nonsense the source or --config carries.
    param('import_nan_weight', f'--src={{tmp}}/src --workdir={{tmp}}/w',
          r'tensor .* holds non-finite values', _src(_nan_weight), module=IMPORT),
    param('import_seq_len_zero', f'--src={{tmp}}/src --workdir={{tmp}}/w '
          '--config={configs}/lm_dense.py --config.seq_len=0',
          r'seq_len=0 must be a positive integer', _src(), module=IMPORT),
    param('import_heads_a_word', f'--src={{tmp}}/src --workdir={{tmp}}/w',
          r"num_attention_heads='four' must be a positive integer",
          _src(_config(num_attention_heads='four')), module=IMPORT),
    param('import_layers_a_float', f'--src={{tmp}}/src --workdir={{tmp}}/w',
          r'num_hidden_layers=2.5 must be a positive integer',
          _src(_config(num_hidden_layers=2.5)), module=IMPORT),
    param('import_header_a_list', f'--src={{tmp}}/src --workdir={{tmp}}/w',
          r'safetensors header is a JSON list', _src(lambda d: _header(d, [1, 2])), module=IMPORT),
    param('import_header_offsets_text', f'--src={{tmp}}/src --workdir={{tmp}}/w',
          r"tensor x has data_offsets='a'", _src(lambda d: _header(
              d, {'x': dict(dtype='F32', shape=[1], data_offsets='a')})), module=IMPORT),
    param('import_index_entry_above_src', f'--src={{tmp}}/src --workdir={{tmp}}/w',
          r"weight_map entry '../x.safetensors' points outside --src",
          _both(_src(_index('../x.safetensors')), lambda p: damage.write(
              p['tmp'], 'x.safetensors', b'')), module=IMPORT),
    param('import_index_entry_absolute', f'--src={{tmp}}/src --workdir={{tmp}}/w',
          r"weight_map entry '/etc/passwd' points outside --src", _src(_index('/etc/passwd')),
          module=IMPORT),
    param('import_gguf_cut', f'--src={{tmp}}/m.gguf --workdir={{tmp}}/w',
          r'm.gguf is not a readable GGUF file \(truncated or corrupt', _gguf(GGUF_CUT),
          module=IMPORT),
    param('import_gguf_huge_tensor_count', f'--src={{tmp}}/m.gguf --workdir={{tmp}}/w',
          r'm.gguf is not a readable GGUF file', _gguf(GGUF_HUGE_COUNT), module=IMPORT),
    # export_hf: --out against the workdir of --ckpt.
    param('export_out_is_the_workdir', '--ckpt={copy} --out={copy} --overwrite',
          r'--out=.*/copy \(.*\) must lie outside --ckpt \(workdir .*/copy\)', module=EXPORT),
    param('export_out_is_the_workdir_of_a_step', '--ckpt={copy}/checkpoints/2 --out={copy} '
          '--overwrite', r'must lie outside --ckpt \(workdir .*/copy\)', module=EXPORT),
    param('export_out_inside_the_workdir', '--ckpt={copy} --out={copy}/hf',
          r'must lie outside --ckpt', module=EXPORT),
    param('export_out_above_the_workdir', '--ckpt={copy} --out={tmp} --overwrite',
          r'must lie outside --ckpt', module=EXPORT),
    param('export_out_a_link_to_the_workdir', '--ckpt={copy} --out={tmp}/l --overwrite',
          r'must lie outside --ckpt', _link('l', '{copy}'), module=EXPORT),
    param('export_ckpt_a_link_out_inside', '--ckpt={tmp}/l --out={copy}/hf',
          r'must lie outside --ckpt \(workdir .*/copy\)', _link('l', '{copy}'), module=EXPORT),
]


@pytest.mark.parametrize('row', ROWS)
def test_interop_refuses_bad_input(cli, trained, tmp_path, row):
  rows.check(cli, row.module, row, tmp_path, trained)
