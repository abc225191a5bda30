"""The `data` config group: corpus, tokenizer, split and packing."""
import dataclasses

from moe_jax.config_group import field


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """These defaults are the config's (configs/common.py builds the group from them)."""
  source: str = 'shakespeare'    # shakespeare | text_files | sft | prepared (data/sources/)
  patterns: str = ''             # text_files, sft: comma-separated glob patterns
  path: str = ''                 # prepared: the --out of moe_jax.data.prepare
  encoding: str = ''             # text_files: '' detects each file's (data/corpus.py)
  chat_template: str = 'model'   # sft: the tokenizer's own (model) | plain (data/chat.py)
  tokenizer: str = 'byte'        # byte | bpe
  bpe_vocab_size: int = 4096
  tokenizer_path: str = ''       # bpe: an existing tokenizer.json
  val_fraction: float = 0.05     # share of documents held out for validation
  split_seed: int = 0            # picks the validation documents (independent of `seed`)
  part: str = ''                 # '' every training document | pretrain | cpt: two disjoint
  cpt_fraction: float = 0.5      #   parts by document, cpt_fraction of them for CPT (corpus.py)
  worker_count: int = field(0, at_least=0)   # grain workers; 0: in-process
