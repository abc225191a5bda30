r"""Export a moe_jax checkpoint as a transformers checkpoint directory.

  python -m moe_jax.interop.export_hf --ckpt=CKPT --out=OUT [--arch=auto|mixtral|qwen3_moe|qwen2_moe|llama|qwen2|qwen3] [--overwrite]

CKPT is a workdir (its newest checkpoint) or one step directory. OUT gets
config.json, generation_config.json, model.safetensors and the tokenizer;
`transformers.AutoModelForCausalLM.from_pretrained(OUT)` loads it. `auto`
picks the architecture from the model: shared experts -> Qwen2-MoE (their
gate, moe.shared_gate, required), qk_norm -> Qwen3 / Qwen3-MoE, q/k/v biases
-> Qwen2, else Llama / Mixtral. A feature the architecture has no word for
(interleaved dense layers in Mixtral, ungated shared experts, sigmoid scores, a
selection bias, ...) is a one-line error. OUT appears whole or not at all and
must not exist unless --overwrite. Prints a one-line JSON summary.
"""
from absl import flags

from moe_jax import cli
from moe_jax.interop import exporter


def define_flags():
  """The command line; defined only when run as a program, so importing this
  module beside another entry point defines no clashing flags."""
  flags.DEFINE_string('ckpt', None, 'Workdir or checkpoint step directory.')
  flags.DEFINE_string('out', None, 'New transformers checkpoint directory.')
  flags.DEFINE_string('arch', 'auto', 'auto | mixtral | qwen3_moe | qwen2_moe | llama | qwen2 | qwen3')
  flags.DEFINE_bool('overwrite', False, 'Replace an existing --out.')
  flags.mark_flags_as_required(['ckpt', 'out'])


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  cli.print_json_result(exporter.export_checkpoint, f.ckpt, f.out, f.arch, f.overwrite)


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
