"""Corpus sources and the train/validation split by whole document."""
import codecs
import warnings

import pytest

from moe_jax.data import corpus
from moe_jax.errors import ConfigError


def test_shakespeare_is_38_plays_without_markdown_hard_breaks():
  docs = corpus.shakespeare()
  assert len(docs) == 38
  assert len({d.name for d in docs}) == 38
  hamlet = next(d for d in docs if d.name.endswith('hamlet.md'))
  assert hamlet.text.startswith('# Hamlet\n')
  assert 'Who\'s there?\n' in hamlet.text
  assert all(' \n' not in d.text for d in docs)
  assert sum(len(d.text) for d in docs) > 4_500_000


def _docs(n):
  return [corpus.Document(f'doc{i}', f'text {i}') for i in range(n)]


@pytest.mark.parametrize('n,fraction,num_val', [(38, 0.05, 2), (2, 0.5, 1), (10, 0.01, 1),
                                                (10, 0.99, 9), (100, 0.2, 20)])
def test_split_is_by_whole_document(n, fraction, num_val):
  docs = _docs(n)
  train, val = corpus.split(docs, fraction)
  assert len(val) == num_val
  assert not {d.name for d in train} & {d.name for d in val}
  assert sorted(train + val, key=docs.index) == docs


def test_split_is_deterministic_and_follows_split_seed():
  docs = _docs(40)
  assert corpus.split(docs, 0.25) == corpus.split(list(docs), 0.25)
  vals = {tuple(d.name for d in corpus.split(docs, 0.25, split_seed=s)[1]) for s in range(4)}
  assert len(vals) == 4


def test_split_needs_two_documents():
  with pytest.raises(ConfigError, match='at least 2'):
    corpus.split(_docs(1), 0.5)
  with pytest.raises(ConfigError, match='data.val_fraction'):
    corpus.split(_docs(5), 0.0)


def test_text_files_reads_each_file_once_as_a_document(tmp_path):
  (tmp_path / 'a.txt').write_text('alpha')
  (tmp_path / 'sub').mkdir()
  (tmp_path / 'sub' / 'b.txt').write_text('beta')
  (tmp_path / 'empty.txt').write_text('')
  docs = corpus.text_files(f'{tmp_path}/*.txt, {tmp_path}/**/*.txt')
  assert sorted(d.text for d in docs) == ['alpha', 'beta']


def test_text_files_invalid_utf8_is_replaced_with_a_warning(tmp_path):
  path = tmp_path / 'bad.txt'
  path.write_bytes(b'good \xff\xfe bytes \xc3\xa9')
  with pytest.warns(UserWarning, match='bad.txt: not valid UTF-8'):
    (doc,) = corpus.text_files(str(path))
  assert doc.text == 'good \ufffd\ufffd bytes \u00e9'


def test_text_files_valid_utf8_gives_no_warning(tmp_path):
  (tmp_path / 'ok.txt').write_text('caf\u00e9', encoding='utf-8')
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    (doc,) = corpus.text_files(str(tmp_path / 'ok.txt'))
  assert doc.text == 'caf\u00e9'


def test_text_files_missing_or_empty_is_a_config_error_naming_the_pattern(tmp_path):
  (tmp_path / 'a.txt').write_text('alpha')
  (tmp_path / 'e.txt').write_text('')
  missing = f'{tmp_path}/nothing*.txt'
  with pytest.raises(ConfigError, match='nothing'):
    corpus.text_files(f'{tmp_path}/a.txt,{missing}')
  with pytest.raises(ConfigError, match='e.txt.*empty'):
    corpus.text_files(f'{tmp_path}/e.txt')
  with pytest.raises(ConfigError, match='data.patterns'):
    corpus.text_files(' , ')


def test_text_files_detect_each_files_encoding(tmp_path):
  text = 'Café, naïve façade: “quoted” — ok'
  (tmp_path / 'a_latin1.txt').write_bytes('Café, naïve façade'.encode('latin-1'))
  (tmp_path / 'b_cp1252.txt').write_bytes(text.encode('cp1252'))
  (tmp_path / 'c_utf16.txt').write_bytes(text.encode('utf-16'))   # with its BOM
  (tmp_path / 'd_utf8bom.txt').write_bytes(codecs.BOM_UTF8 + text.encode('utf-8'))
  (tmp_path / 'e_utf8.txt').write_text(text, encoding='utf-8')
  with pytest.warns(UserWarning, match=r'2 file\(s\) are not UTF-8 .*a_latin1.txt: cp1252'):
    docs = corpus.text_files(f'{tmp_path}/*.txt')
  assert [d.text for d in docs] == ['Café, naïve façade', text, text, text, text]


def test_text_files_data_encoding_is_strict(tmp_path):
  path = tmp_path / 'k.txt'
  path.write_bytes('Привет'.encode('cp1251'))
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    (doc,) = corpus.text_files(str(path), 'cp1251')
  assert doc.text == 'Привет'
  with pytest.raises(ConfigError, match=r'k.txt: not valid utf-8 .* at byte 0'):
    corpus.text_files(str(path), 'utf-8')
  with pytest.raises(ConfigError, match="data.encoding='klingon'"):
    corpus.text_files(str(path), 'klingon')
