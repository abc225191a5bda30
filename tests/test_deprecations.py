"""No moe_jax module uses a deprecated jax API (issue 40's version hygiene).

jax deprecates names by a module `__getattr__` that warns on access
(jax._src.deprecations), so importing a module finds only what it touches at
import time. The check therefore also resolves, with DeprecationWarnings
turned into errors, every attribute chain that the module's source spells on
a jax module alias (`pl.dot`, `jax.experimental.shard_map.shard_map`, ...),
whether it sits at the top level or inside a function. It runs in a fresh
interpreter, so no warning filter, `__warningregistry__` or import cache of
this test process hides a warning that was already shown once.
"""
import os
import subprocess
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHECK = r'''
import ast, importlib, os, pkgutil, sys, types, warnings

from absl import flags

import moe_jax

problems = []
base_flags = set(flags.FLAGS)


def jax_names(tree):
  """{alias: dotted name} for every `import jax...` / `from jax... import`."""
  out = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        if a.name.split('.')[0] == 'jax':
          out[a.asname or 'jax'] = a.name if a.asname else 'jax'
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      if node.module.split('.')[0] == 'jax':
        for a in node.names:
          out[a.asname or a.name] = f'{node.module}.{a.name}'
  return out


def chains(tree, roots):
  """(line, [root, attr, ...]) for every outermost attribute chain on a root."""
  inner = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
      inner.add(id(node.value))
  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute) and id(node) not in inner:
      parts, n = [], node
      while isinstance(n, ast.Attribute):
        parts.append(n.attr)
        n = n.value
      if isinstance(n, ast.Name) and n.id in roots:
        yield node.lineno, [n.id] + parts[::-1]


def resolve(dotted):
  """The object a dotted jax name denotes, importing submodules on the way."""
  parts = dotted.split('.')
  obj = importlib.import_module(parts[0])
  for i, part in enumerate(parts[1:], 1):
    try:
      obj = getattr(obj, part)
    except AttributeError:
      obj = importlib.import_module('.'.join(parts[:i + 1]))
  return obj


with warnings.catch_warnings():
  # jax warns with stacklevel=2: the warning names the module that touched
  # the deprecated name (a moe_jax module, or this script resolving one), so
  # a library's own deprecated uses (flax, orbax) are not counted as ours.
  warnings.filterwarnings('error', category=DeprecationWarning,
                          module=r'(moe_jax(\..*)?|__main__)$')
  root = os.path.dirname(moe_jax.__file__)
  for info in pkgutil.walk_packages(moe_jax.__path__, 'moe_jax.'):
    try:
      module = importlib.import_module(info.name)
    except DeprecationWarning as w:
      problems.append(f'import {info.name}: {w}')
      continue
    finally:   # entry points define flags like --seed: let the next one define its own
      for name in set(flags.FLAGS) - base_flags:
        delattr(flags.FLAGS, name)
    path = module.__file__
    tree = ast.parse(open(path).read(), path)
    names = jax_names(tree)
    for alias, dotted in names.items():   # `from jax.x import y` too
      try:
        resolve(dotted)
      except DeprecationWarning as w:
        problems.append(f'{os.path.relpath(path, os.path.dirname(root))}: {dotted}: {w}')
      except (AttributeError, ImportError) as e:
        problems.append(f'{os.path.relpath(path, os.path.dirname(root))}: {dotted}: '
                        f'missing in this jax ({e})')
    for line, chain in chains(tree, names):
      where = f'{os.path.relpath(path, os.path.dirname(root))}:{line} {".".join(chain)}'
      try:
        obj = resolve(names[chain[0]])
        for attr in chain[1:]:
          if not isinstance(obj, types.ModuleType):
            break   # past the modules: jax deprecates module attributes
          obj = getattr(obj, attr)
      except DeprecationWarning as w:
        problems.append(f'{where}: {w}')
      except (AttributeError, ImportError) as e:
        problems.append(f'{where}: missing in this jax ({e})')
print('\n'.join(problems))
sys.exit(1 if problems else 0)
'''


def test_no_module_uses_a_deprecated_jax_api():
  env = dict(os.environ, PYTHONPATH=_REPO, PYTHONWARNINGS='')
  proc = subprocess.run([sys.executable, '-c', _CHECK], cwd=_REPO, env=env,
                        capture_output=True, text=True, check=False, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
