"""The repository's commands, found rather than listed: every module of
moe_jax/ and experiments/ that runs under `if __name__ == '__main__':` and
every package with a __main__.py, by the name `python -m` takes. A test that
walks them sees a new command without an edit."""
import os
import pkgutil
import re

import experiments
import moe_jax

_GUARD = re.compile(r"^if __name__ == '__main__':", re.MULTILINE)


def find():
  names = []
  for package in (moe_jax, experiments):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):
      where = os.path.join(info.module_finder.path, info.name.rsplit('.', 1)[-1])
      if info.ispkg:
        if os.path.isfile(os.path.join(where, '__main__.py')):
          names.append(info.name)
      elif not info.name.endswith('.__main__'):   # its package is the command
        with open(where + '.py') as f:
          if _GUARD.search(f.read()):
            names.append(info.name)
  return sorted(names)
