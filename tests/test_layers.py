"""The import graph points down (docs/internals.md, "Layers"): each package of
moe_jax imports only the packages below it. Read from the source (every
import statement, also inside functions), so the rule holds without running
any of it."""
import ast
import os

import pytest

_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'moe_jax')

# What each part of moe_jax may import of moe_jax, bottom up. Entry points
# (main.py, evaluate.py, cli.py, ...) and train/ sit on top and are free.
ALLOWED = {
    'errors': set(),
    'model_name': set(),
    'atomic': set(),
    'containment': {'errors'},
    'json_file': {'errors'},
    'registry': {'errors'},
    'schema': {'errors'},
    'kernels': {'errors'},
    'sharding': {'errors'},
    'parallel': {'errors', 'kernels', 'sharding'},
    'models': {'errors', 'schema', 'kernels', 'sharding', 'parallel', 'registry'},
    'data': {'errors', 'atomic', 'containment', 'schema', 'registry'},
    'workdir': {'errors', 'atomic', 'containment', 'json_file', 'schema', 'sharding',
                'models', 'data', 'model_name'},
    'upcycle': {'errors', 'atomic', 'containment', 'schema', 'registry', 'sharding',
                'models', 'data', 'workdir'},
    'eval': {'errors', 'atomic', 'containment', 'sharding', 'models', 'data', 'workdir', 'upcycle'},
    'interop': {'errors', 'atomic', 'containment', 'sharding', 'models', 'data', 'workdir',
                'upcycle'},
    'scaling_laws': {'errors', 'atomic', 'containment', 'json_file', 'model_name'},
}


def _part(module):
  """'moe_jax.models.moe' -> 'models'; 'moe_jax.sharding' -> 'sharding'."""
  parts = module.split('.')
  return parts[1] if len(parts) > 1 else ''


def _imports(path, module):
  """Every moe_jax module the file at `path` (module name `module`) imports."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  package = module.rsplit('.', 1)[0] if not path.endswith('__init__.py') else module
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:   # relative: resolve against this file's package
        anchor = package.split('.')[:len(package.split('.')) - node.level + 1]
        base = '.'.join(anchor + ([base] if base else []))
      yield base
      yield from (f'{base}.{alias.name}' for alias in node.names)


def _modules(part):
  root = os.path.join(_PACKAGE, part)
  if os.path.isfile(root + '.py'):
    yield root + '.py', f'moe_jax.{part}'
    return
  for directory, _, names in os.walk(root):
    for name in sorted(names):
      if name.endswith('.py'):
        rel = os.path.relpath(os.path.join(directory, name[:-3]), _PACKAGE)
        yield os.path.join(directory, name), 'moe_jax.' + rel.replace(os.sep, '.')


def _is_command(path):
  with open(path) as f:
    return path.endswith('__main__.py') or "if __name__ == '__main__':" in f.read()


def _is_part(name):
  return name and os.path.isdir(os.path.join(_PACKAGE, name)) or os.path.isfile(
      os.path.join(_PACKAGE, name + '.py'))


@pytest.mark.parametrize('part', sorted(ALLOWED))
def test_imports_point_down(part):
  bad = set()
  for path, module in _modules(part):
    # A package's command lines (__main__.py, or a module run with `python -m`)
    # may also use the shared CLI helpers.
    allowed = ALLOWED[part] | {part} | ({'cli'} if _is_command(path) else set())
    for name in _imports(path, module):
      if name.split('.')[0] != 'moe_jax':
        continue
      other = _part(name)
      if _is_part(other) and other not in allowed:
        bad.add(f'{os.path.relpath(path, _PACKAGE)} imports {name}')
  assert not bad, sorted(bad)


def test_the_rule_sees_a_violation(tmp_path):
  """The parser catches absolute, from- and function-level imports alike."""
  path = tmp_path / 'x.py'
  path.write_text('import moe_jax.train.trainer\n'
                  'def f():\n  from moe_jax.train import checkpoint\n'
                  'from moe_jax import eval as e\n')
  got = set(_imports(str(path), 'moe_jax.upcycle.x'))
  assert {'moe_jax.train.trainer', 'moe_jax.train', 'moe_jax.eval'} <= got


def test_every_package_has_a_rule():
  """A new package gets a row in ALLOWED (or is an entry point on top)."""
  on_top = {'train', '__pycache__'}
  packages = {n for n in os.listdir(_PACKAGE) if os.path.isdir(os.path.join(_PACKAGE, n))}
  assert packages - on_top <= set(ALLOWED), sorted(packages - on_top - set(ALLOWED))


def _cycles(graph):
  """Strongly connected components of more than one module (Tarjan)."""
  index, low, stack, out = {}, {}, [], []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    for w in graph.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = stack[stack.index(v):]
      del stack[stack.index(v):]
      if len(component) > 1:
        out.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_no_import_circles():
  """No two modules import each other, directly or round a loop, counting
  imports inside functions (a deferred import hides a circle; it does not
  remove it). A registry package importing its own entries (registry.import_all)
  is dynamic and not counted."""
  modules = dict((module, path) for part in os.listdir(_PACKAGE)
                 if part.endswith('.py') or os.path.isdir(os.path.join(_PACKAGE, part))
                 for path, module in _modules(part.removesuffix('.py')))
  modules = {m.removesuffix('.__init__'): p for m, p in modules.items()}
  graph = {m: {n for n in _imports(p, m) if n in modules and n != m} for m, p in modules.items()}
  assert not _cycles(graph), _cycles(graph)


def test_the_circle_rule_sees_a_circle():
  assert _cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
  assert _cycles({'a': {'b'}, 'b': set()}) == []
