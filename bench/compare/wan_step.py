"""One denoise step of Wan2.2 TI2V-5B's transformer (CFG batch of 2), kiln
against the PyTorch implementation in tools/wan/transformer.py, on the same
weights, side by side in one run, and the ratio.

    /usr/bin/python3 bench/compare/wan_step.py bench/out/wan22 [--frames 17 --width 256 --height 256]
        [--dtype bf16] [--warmup 1] [--iters 1] [--threads 2]

kiln: build/bench/kiln_bench_video in graph-loop mode, 3 steps, its steady
step (after the first, which packs the weights). PyTorch: the transformer
with the folder's weights (bf16 as stored, or widened to f32), random inputs
of the step's shapes, `warmup` untimed calls, then `iters` timed. One process at a
time holds the weights (the machine has 24 GiB). Prints one JSON object.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from tools.wan.transformer import WanTransformer3DModel  # noqa: E402


def safetensors_tensors(path, dtype):
    """name -> torch tensor of `dtype`, read whole (BF16 as stored, or widened)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = np.frombuffer(f.read(), np.uint8)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] in ("BF16", "F32"), f"{name}: {info['dtype']}"
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "BF16":
            t = torch.from_numpy(raw.view(np.int16).copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(raw.view(np.float32).copy())
        out[name] = t.reshape(info["shape"]).to(dtype)
    return out


def load_transformer(folder, dtype):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    model = WanTransformer3DModel(config, device="meta")
    index = os.path.join(folder, "diffusion_pytorch_model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["diffusion_pytorch_model.safetensors"]
    params = dict(model.named_parameters())
    loaded = 0
    for file in files:
        for name, tensor in safetensors_tensors(os.path.join(folder, file), dtype).items():
            module_name, _, attr = name.rpartition(".")
            module = model.get_submodule(module_name) if module_name else model
            assert params[name].shape == tensor.shape, name
            setattr(module, attr, torch.nn.Parameter(tensor, requires_grad=False))
            loaded += 1
    assert loaded == len(params), f"{loaded} of {len(params)} parameters in the files"
    return model.eval(), config


def kiln_step(args):
    out = subprocess.run([os.path.join(ROOT, "build/bench/kiln_bench_video"), "--model", args.model, "--precision",
                          args.dtype, "--frames", str(args.frames), "--width", str(args.width), "--height",
                          str(args.height), "--steps", "3", "--modes", "graph-loop", "--json"],
                         check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
    return json.loads(out.stdout)["modes"]["graph-loop"]["step_ms_median"]


def torch_step(args):
    torch.set_num_threads(args.threads)  # Debian's torch starts with one
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model, config = load_transformer(os.path.join(args.model, "transformer"), dtype)
    frames, h, w = (args.frames - 1) // 4 + 1, args.height // 16, args.width // 16
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, config["in_channels"], frames, h, w, generator=g).to(dtype)
    t = torch.full((2,), 999.0)
    context = torch.randn(2, 512, config["text_dim"], generator=g).to(dtype)
    times = []
    with torch.no_grad():
        for _ in range(args.warmup):
            model(x, t, context)
        for _ in range(args.iters):
            start = time.perf_counter()
            model(x, t, context)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a Wan2.2 TI2V-5B diffusers folder (tools/make_tiny_wan.py --full writes one)")
    parser.add_argument("--frames", type=int, default=17)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--height", type=int, default=256)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="bf16")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--iters", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    kiln_ms = kiln_step(args)
    torch_ms = torch_step(args)
    print(json.dumps({"model": args.model, "dtype": args.dtype, "frames": args.frames, "width": args.width,
                      "height": args.height, "threads": args.threads, "kiln_step_ms": kiln_ms,
                      "torch_step_ms": torch_ms, "kiln_speedup": torch_ms / kiln_ms, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
