# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Many dense models into one MoE (Branch-Train-MiX, mergekit-moe)
#
# **Question.** Three dense branches of one base, each trained on its own
# domain (Shakespeare, the SFT mixture's text, Python standard-library
# code), merged into one MoE whose expert i is branch i's MLP
# (`configs/upcycle/merge.py`, attention and embeddings averaged): does a
# router trained to tell the branches apart send each domain's tokens to its
# branch's expert, and does the merged model, trained on the union, beat a
# dense model trained on the union for the same tokens?
#
# This runs the study's sweep (`experiments/merge/config.py`) at `:small`
# size, then its report (`experiments/merge/report.py`): every model's loss
# on every domain's held-out text, and the routing share by domain right
# after merging (`@0`) and after training. `SMALL = False` runs the full study
# of docs/experiments.md ("Merging dense branches into an MoE").
#
# **Run time.** About five minutes on a Colab CPU runtime at `:small` (an
# estimate: seven short runs, each mostly start-up and compilation).

# %%
# Where moe_jax comes from. Opened from a checkout (this notebook in its
# colab/ folder: a local clone, or one copied to a mounted Google Drive), the
# checkout is used as it is. Opened alone (uploaded to Colab), set REPO_URL to
# a copy of moe_jax you trust (a git URL pip accepts) or install it yourself.
REPO_URL = ''  # <- SET ME only when this notebook is not inside a moe_jax checkout
import os
import subprocess
import sys

_here = os.path.abspath(os.getcwd())
_places = [_here] + [os.path.dirname(_here)] + [
    os.path.join(d, 'moe_jax') for d in ('/content', '/content/drive/MyDrive')]
ROOT = next((d for d in _places if os.path.isfile(os.path.join(d, 'setup.py')) and
             os.path.isdir(os.path.join(d, 'moe_jax', 'train'))), None)
if ROOT:
  if 'google.colab' in sys.modules:   # Colab lacks some dependencies: install the checkout
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '-e', ROOT], check=True)
  sys.path.insert(0, ROOT)
  os.chdir(ROOT)   # configs/ and experiments/ paths are relative to the checkout
elif REPO_URL:
  subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', f'git+{REPO_URL}'], check=True)
else:
  try:
    import moe_jax  # pylint: disable=unused-import
  except ImportError:
    raise RuntimeError(f'no moe_jax checkout in {_here} or its parent, in /content or on Drive, '
                       'and moe_jax is not installed: open this notebook from a checkout, or '
                       'set REPO_URL in this cell') from None

# %% tags=["parameters"]
SMALL = True
DOMAIN_BYTES = 40960   # per domain; every tenth 4 KB piece is held out
WORKDIR = '/tmp/moe_jax_colab/06_merge'

# %%
import json
import shutil

from IPython.display import Image, display

from experiments import launch
from experiments.merge import domains, report

data, sweep_dir = os.path.join(WORKDIR, 'domains'), os.path.join(WORKDIR, 'sweep')
if not os.path.isdir(data):
  print(domains.prepare(data, DOMAIN_BYTES))
spec = f"experiments/merge/config.py:{'small,' if SMALL else ''}data={data}"
assert launch.launch(spec, sweep_dir) == 0, "a run failed: see its log.txt"
print(report.write(sweep_dir, data))
display(Image(os.path.join(sweep_dir, 'plots', report.PLOT)))

# %%
results = json.load(open(os.path.join(sweep_dir, report.RESULTS_FILE)))
print(json.dumps(dict(loss=results['loss'], share=results['share'])))
