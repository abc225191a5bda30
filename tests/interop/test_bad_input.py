"""Bad checkpoints and impossible exports: one-line errors naming the problem,
and nothing written."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from configs import common
from moe_jax.errors import ConfigError
from moe_jax.interop import archs, importer, safetensors_io
from tests.interop import fixtures

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _copy(tmp_path, name):
  dst = tmp_path / name
  shutil.copytree(fixtures.path(name), dst)
  return dst


def _edit_config(directory, **changes):
  with open(directory / 'config.json') as f:
    config = json.load(f)
  config.update(changes)
  with open(directory / 'config.json', 'w') as f:
    json.dump(config, f)


def _sharded(tmp_path):
  return _copy(tmp_path, 'llama_gqa_sharded')


def _missing_shard(tmp_path):
  d = _sharded(tmp_path)
  os.remove(d / 'model-00002-of-00004.safetensors')
  return d


def _truncated_shard(tmp_path):
  d = _sharded(tmp_path)
  path = d / 'model-00003-of-00004.safetensors'
  path.write_bytes(path.read_bytes()[:-100])
  return d


def _shard_lacks_a_tensor(tmp_path):
  d = _sharded(tmp_path)
  with open(d / safetensors_io.INDEX) as f:
    index = json.load(f)
  index['weight_map']['model.layers.0.extra.weight'] = 'model-00001-of-00004.safetensors'
  with open(d / safetensors_io.INDEX, 'w') as f:
    json.dump(index, f)
  return d


def _wrong_shape(tmp_path):
  d = _copy(tmp_path, 'qwen3_qk_norm')
  tensors = {k: np.asarray(v) for k, v in safetensors_io.read_file(d / 'model.safetensors').items()}
  name = 'model.layers.0.self_attn.q_proj.weight'
  tensors[name] = np.ascontiguousarray(tensors[name].T)
  safetensors_io.write_file(str(d / 'model.safetensors'), tensors)
  return d


def _more_layers_than_tensors(tmp_path):
  d = _copy(tmp_path, 'qwen3_qk_norm')
  _edit_config(d, num_hidden_layers=3)
  return d


def _unsupported_arch(tmp_path):
  d = _copy(tmp_path, 'qwen3_qk_norm')
  _edit_config(d, architectures=['GPT2LMHeadModel'])
  return d


def _pickle_only(tmp_path):
  d = _copy(tmp_path, 'qwen3_qk_norm')
  os.remove(d / 'model.safetensors')
  (d / 'pytorch_model.bin').write_bytes(b'not read')
  return d


def _odd_shared_width(tmp_path):
  d = _copy(tmp_path, 'qwen2_moe_shared')
  _edit_config(d, shared_expert_intermediate_size=9)
  return d


def _no_tokenizer(tmp_path):
  d = _copy(tmp_path, 'qwen3_qk_norm')
  os.remove(d / 'tokenizer.json')
  return d


_BAD = [
    (_missing_shard, r'shard\(s\) model-00002-of-00004.safetensors listed in .* are missing'),
    (_truncated_shard, 'model-00003-of-00004.safetensors is truncated'),
    (_shard_lacks_a_tensor, 'model-00001-of-00004.safetensors does not match .* lacks '
                            'model.layers.0.extra.weight'),
    (_wrong_shape, r'tensor model.layers.0.self_attn.q_proj.weight has shape \(8, 16\); the '
                   r'config implies \(16, 8\)'),
    (_more_layers_than_tensors, 'missing model.layers.2'),
    (_unsupported_arch, r"architecture \['GPT2LMHeadModel'\] is not supported; supported: "
                        'LlamaForCausalLM, MixtralForCausalLM'),
    (_pickle_only, r'no \*.safetensors files \(pickled .bin checkpoints are not read'),
    (_no_tokenizer, 'has no tokenizer.json'),
    (_odd_shared_width, r'shared_expert_intermediate_size=9, not a multiple of '
                        r'moe_intermediate_size=6'),
]


@pytest.mark.parametrize('make,match', _BAD, ids=[make.__name__[1:] for make, _ in _BAD])
def test_bad_checkpoint_is_refused_and_nothing_written(tmp_path, make, match):
  src = make(tmp_path)
  workdir = tmp_path / 'workdir'
  with pytest.raises(ConfigError, match=match):
    importer.import_checkpoint(str(src), str(workdir), common.base())
  assert sorted(os.listdir(tmp_path)) == [src.name]


def _config(**groups):
  config = common.base()
  config.model.vocab_size = 64
  for group, values in groups.items():
    config[group].update(values)
  return config


@pytest.mark.parametrize('arch,groups,match', [
    ('llama', dict(moe=dict(num_experts=4)), 'MoE layers .* LlamaForCausalLM'),
    ('mixtral', {}, r'a dense model \(moe.num_experts=0\) has no equivalent in Mixtral'),
    ('llama', dict(model=dict(qk_norm=True)), 'model.qk_norm=True has no equivalent in Llama'),
    ('qwen3', {}, 'model.qk_norm=False has no equivalent in Qwen3'),
    ('qwen2', {}, 'model.qkv_bias=False has no equivalent in Qwen2'),
    ('mixtral', dict(moe=dict(num_experts=4, every=2), model=dict(num_layers=4)),
     r'dense layers between MoE layers \(moe.every=2'),
    ('mixtral', dict(moe=dict(num_experts=4, renormalize=False)), 'moe.renormalize=False'),
    ('mixtral', dict(moe=dict(num_experts=4, num_shared_experts=1)), 'moe.num_shared_experts=1'),
    ('auto', dict(moe=dict(num_experts=4, num_shared_experts=1)),
     r'an ungated shared expert \(moe.shared_gate=False'),
    ('qwen2_moe', dict(moe=dict(num_experts=4)), r'no shared expert .* Qwen2MoeForCausalLM'),
    ('auto', dict(moe=dict(num_experts=4, score='sigmoid')), "moe.score='sigmoid'"),
    ('auto', dict(moe=dict(num_experts=4, use_bias=True)), 'moe.use_bias'),
    ('auto', dict(moe=dict(num_experts=4, router='hash')), "moe.router='hash'"),
    ('auto', dict(model=dict(norm_position='post')), "model.norm_position='post'"),
    ('gpt2', {}, "--arch='gpt2' is not one of auto, llama"),
])
def test_export_refuses_what_the_arch_cannot_hold(arch, groups, match):
  with pytest.raises(ConfigError, match=match):
    archs.pick(_config(**groups), arch)


@pytest.mark.parametrize('groups,want', [
    ({}, 'llama'), (dict(model=dict(qk_norm=True)), 'qwen3'),
    (dict(model=dict(qkv_bias=True)), 'qwen2'), (dict(moe=dict(num_experts=4)), 'mixtral'),
    (dict(moe=dict(num_experts=4, every=2), model=dict(qk_norm=True, num_layers=4)), 'qwen3_moe'),
    (dict(moe=dict(num_experts=4, num_shared_experts=2, shared_gate=True)), 'qwen2_moe'),
])
def test_auto_picks_the_arch_of_the_features(groups, want):
  assert archs.pick(_config(**groups)).name == want


def test_cli_error_is_one_line_and_writes_nothing(tmp_path):
  env = dict(os.environ, PYTHONPATH=_REPO)
  workdir = tmp_path / 'workdir'
  proc = subprocess.run(
      [sys.executable, '-m', 'moe_jax.interop.import_hf', f'--src={tmp_path}/missing.gguf',
       f'--workdir={workdir}'], cwd=_REPO, env=env, capture_output=True, text=True, check=False)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      f'error: --src={tmp_path}/missing.gguf is neither a transformers checkpoint directory '
      'nor a .gguf file']
  assert not workdir.exists()
