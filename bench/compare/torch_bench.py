"""Times one PyTorch run of a bench/compare model and prints one JSON line:
{"ms": [...], "median_ms": ..., "openblas": ...}. One process per run (run.py measures its peak RSS).

    /usr/bin/python3 bench/compare/torch_bench.py NAME --mode eager|torchscript --dtype f32|bf16 [--iters 5]

torchscript: torch.jit.trace, torch.jit.freeze, torch.jit.optimize_for_inference. bf16: weights and
float inputs in bf16 (the CPU bf16 kernels; ATEN_CPU_CAPABILITY picks which, set by the caller).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("name", choices=list(models.MODELS))
    parser.add_argument("--mode", choices=["eager", "torchscript"], default="eager")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # Debian's torch starts with one

    model, _, _ = models.build(args.name)
    folder = os.path.join(models.OUT, args.name, "inputs")
    inputs = []
    for name in model.forward.__code__.co_varnames[1:model.forward.__code__.co_argcount]:
        inputs.append(torch.from_numpy(np.load(os.path.join(folder, name + ".npy"))))
    if args.dtype == "bf16":
        model = model.to(torch.bfloat16)
        inputs = [x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        if args.mode == "torchscript":
            model = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, tuple(inputs))))
        for _ in range(args.warmup):
            model(*inputs)
        times = []
        for _ in range(args.iters):
            start = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - start) * 1e3)
    with open("/proc/self/maps") as f:  # which BLAS Debian's alternatives gave torch
        openblas = "openblas" in f.read()
    print(json.dumps({"ms": times, "median_ms": statistics.median(times), "openblas": openblas}))


if __name__ == "__main__":
    main()
