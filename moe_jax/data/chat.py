"""Chat rendering: a conversation as text pieces, each marked prompt or response.

Two templates (`data.chat_template`):

* `model`: the tokenizer's own Jinja chat template (`chat_template` of the
  `tokenizer_config.json` beside its `tokenizer.json`; the GGUF import keeps
  it verbatim), rendered as transformers renders it: a sandboxed Jinja
  environment with `trim_blocks` and `lstrip_blocks`, called with
  `messages`, `add_generation_prompt` and the special tokens. The template
  writes the model's own end-of-turn token (ChatML's `<|im_end|>`).
* `plain`, for tokenizers without one (ours):

      {system}\\n\\n            (only when the first message is a system message)
      User: {content}\\n
      Assistant: {content}<eos>\\n

  `<eos>` is the tokenizer's end-of-text id, appended after each assistant turn
  by `moe_jax/data/sft.py` (a byte tokenizer cannot spell it as text).

`pieces(messages, ...)` cuts the rendering at each assistant turn: the text of
turn i is what rendering messages[:i + 1] adds to rendering messages[:i] with
the generation prompt (`<|im_start|>assistant\\n`), which stays on the prompt
side. A template whose renderings are not prefixes of each other cannot be
cut this way and is an error. `prompt(messages, ...)` is the text a model
continues at inference: the same prefix, so training and evaluation see one
tokenisation of the prompt.
"""
import functools

from moe_jax.errors import ConfigError

MODEL, PLAIN = 'model', 'plain'
TEMPLATES = (MODEL, PLAIN)
ROLES = ('system', 'user', 'assistant')


@functools.lru_cache(maxsize=8)
def _compiled(template):
  import jinja2  # pylint: disable=g-import-not-at-top
  from jinja2 import ext, sandbox  # pylint: disable=g-import-not-at-top

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  env = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                              extensions=[ext.loopcontrols])
  env.globals['raise_exception'] = raise_exception
  try:
    return env.from_string(template)
  except jinja2.exceptions.TemplateError as e:
    raise ConfigError(f'the chat template does not parse: {e}') from e


def _render_plain(messages, add_generation_prompt):
  out = []
  for i, m in enumerate(messages):
    if m['role'] == 'system':
      out.append(f'{m["content"]}\n\n' if i == 0 else f'System: {m["content"]}\n')
    elif m['role'] == 'user':
      out.append(f'User: {m["content"]}\n')
    else:
      out.append(f'Assistant: {m["content"]}\n')
  if add_generation_prompt:
    out.append('Assistant: ')
  return ''.join(out)


class Renderer:
  """Renders conversations with one template (`kind`: model | plain)."""

  def __init__(self, kind, template=None, specials=None, key='data.chat_template'):
    if kind not in TEMPLATES:
      raise ConfigError(f'{key}={kind!r} is not one of {", ".join(TEMPLATES)}')
    if kind == MODEL and not template:
      raise ConfigError(f'{key}={kind!r} but the tokenizer has no chat_template (none in its '
                        f'tokenizer_config.json); set {key}={PLAIN!r}')
    self.kind = kind
    self._template = _compiled(template) if kind == MODEL else None
    self._specials = {k: v for k, v in (specials or {}).items()
                      if k.endswith('_token') and isinstance(v, str)}

  @property
  def eos_after_response(self):
    """Whether an end-of-text id follows each response (the plain template)."""
    return self.kind == PLAIN

  def render(self, messages, add_generation_prompt=False):
    if self._template is None:
      return _render_plain(messages, add_generation_prompt)
    import jinja2  # pylint: disable=g-import-not-at-top
    try:
      return self._template.render(messages=list(messages),
                                   add_generation_prompt=add_generation_prompt, **self._specials)
    except jinja2.exceptions.TemplateError as e:
      raise ConfigError(f'the chat template failed: {e}') from e

  def turn_end(self):
    """The text the template writes right after an assistant's words (ChatML:
    '<|im_end|>'), stripped; '' for the plain template, whose turns end with
    the end-of-text id instead."""
    if self._template is None:
      return ''
    words = 'moe_jax'
    messages = [dict(role='user', content='hi'), dict(role='assistant', content=words)]
    head, full = self.prompt(messages[:1]), self.render(messages)
    tail = full[len(head):]
    return tail[tail.find(words) + len(words):].strip() if words in tail else ''

  def prompt(self, messages):
    """The text a model continues to answer `messages` (ending with a user turn)."""
    return self.render(messages, add_generation_prompt=True)

  def pieces(self, messages):
    """[(text, is_response)] whose concatenation renders `messages`."""
    out, done = [], ''
    for i, m in enumerate(messages):
      if m['role'] != 'assistant':
        continue
      head = self.prompt(messages[:i])
      full = self.render(messages[:i + 1])
      if not (head.startswith(done) and full.startswith(head)):
        raise ConfigError('the chat template does not render a conversation as a prefix of '
                          'its continuation, so responses cannot be cut out of it')
      out += [(head[len(done):], False), (full[len(head):], True)]
      done = full
    whole = self.render(messages)
    if not whole.startswith(done):
      raise ConfigError('the chat template does not render a conversation as a prefix of '
                        'its continuation, so responses cannot be cut out of it')
    out.append((whole[len(done):], False))
    return [(text, response) for text, response in out if text]


def check_messages(messages, where):
  """A list of {role, content} dicts with at least one assistant turn, the first
  message not an assistant's; anything else is a ConfigError naming `where`."""
  if not isinstance(messages, list) or not messages:
    raise ConfigError(f'{where}: "messages" must be a non-empty list')
  for m in messages:
    if (not isinstance(m, dict) or m.get('role') not in ROLES or
        not isinstance(m.get('content'), str)):
      raise ConfigError(f'{where}: each message must be {{"role": one of {", ".join(ROLES)}, '
                        f'"content": a string}}, got {str(m)[:80]}')
  if messages[0]['role'] == 'assistant':
    raise ConfigError(f'{where}: the conversation starts with an assistant message')
  if not any(m['role'] == 'assistant' for m in messages):
    raise ConfigError(f'{where}: no assistant message: nothing to train on')
