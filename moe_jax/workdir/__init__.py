"""Run I/O: what training, evaluation and upcycling share about a workdir.

  files.py       atomic JSON writes; config.json and run.json, and their checks
  checkpoint.py  the Orbax manager, CKPT path resolution, abstract restore trees
  placement.py   the device mesh and where batches and params live on it
  staging.py     an output directory (a new workdir, an export) whole or absent

It sits below `train/`, `upcycle/` and `eval/` and imports none of them
(docs/internals.md, "Layers").
"""
