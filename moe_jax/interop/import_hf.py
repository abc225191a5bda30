r"""Import a pretrained transformers checkpoint or GGUF file as a moe_jax workdir.

  python -m moe_jax.interop.import_hf --src=PATH --workdir=DIR [--config=configs/NAME.py[:ARG]] [--overwrite]

PATH is a transformers checkpoint directory (config.json, *.safetensors,
sharded or not, tokenizer.json) or a llama-architecture .gguf file (quantized
tensors are dequantized). Supported: LlamaForCausalLM (SmolLM2 is one),
Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM.
DIR becomes a workdir with a step-0 checkpoint: `python -m moe_jax.evaluate
--ckpt=DIR`, `python -m moe_jax.upcycle --src=DIR ...` and training with
configs/finetune.py:ckpt=DIR read it. The model groups come from the source;
every other key (seq_len, batch_size, data, ...) from --config, or
configs/common.py. Prints a one-line JSON summary. docs/interop.md has the
SmolLM2 example.
"""
from absl import flags
from ml_collections import config_flags

from configs import common
from moe_jax import cli
from moe_jax.interop import importer


def define_flags():
  """The command line; defined only when run as a program, so importing this
  module beside another entry point defines no clashing flags."""
  flags.DEFINE_string('src', None, 'transformers checkpoint directory or .gguf file.')
  flags.DEFINE_string('workdir', None, 'New workdir for the imported model.')
  config_flags.DEFINE_config_file('config', None, 'Run settings (default: configs/common.py).')
  flags.DEFINE_bool('overwrite', False, 'Replace an existing --workdir.')
  flags.mark_flags_as_required(['src', 'workdir'])


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  cli.print_json_result(importer.import_checkpoint, f.src, f.workdir, f.config or common.base(),
                        f.overwrite)


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
