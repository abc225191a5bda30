"""docs/README.md lists every page of docs/, and the README links the index:
a page nobody links is a page nobody reads."""
import os
import re

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DOCS = os.path.join(_REPO, 'docs')


def test_the_docs_index_links_every_page_and_only_pages_that_exist():
  with open(os.path.join(_DOCS, 'README.md')) as f:
    linked = set(re.findall(r'\]\(([\w.-]+\.md)\)', f.read()))
  pages = {name for name in os.listdir(_DOCS) if name.endswith('.md') and name != 'README.md'}
  assert pages <= linked, sorted(pages - linked)
  assert linked <= pages, sorted(linked - pages)


def test_the_readme_links_the_index_the_changelog_and_the_licence():
  with open(os.path.join(_REPO, 'README.md')) as f:
    readme = f.read()
  for target in ('docs/README.md', 'CHANGELOG.md', 'LICENSE', 'docs/multihost.md'):
    assert f']({target})' in readme, target
    assert os.path.exists(os.path.join(_REPO, target)), target
