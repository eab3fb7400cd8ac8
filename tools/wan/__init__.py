"""PyTorch/numpy reference for Wan2.2 TI2V-5B: the oracle kiln's native
Wan support is checked against (spec: the fact sheet wan22-ti2v-5b.md).

    transformer.py      WanTransformer3DModel (diffusers names) and its [W] renaming
    umt5.py             UMT5 encoder (transformers names) and its [W] renaming
    text.py             prompt cleaning, SentencePiece tokenization, tiny tokenizer training
    unipc.py            flow-matching UniPC and Euler in numpy float64
    pipeline.py         the whole generation in float64 torch
    vae.py              Wan2.2 VAE (written separately)
    safetensors_io.py   safetensors files and shards, bf16 rounding

Import with tools/ on sys.path: `from wan import transformer`.
"""
