"""The tiny SD pipeline (tests/models/tiny-sd) end to end in PyTorch, and the inputs ONNX Runtime's run of
it reads (ort_pipeline.js): one reference case of 20 steps, tokenizer to VAE decode.

    /usr/bin/python3 bench/compare/pipeline.py prepare          # writes bench/out/compare/tiny_sd/
    /usr/bin/python3 bench/compare/pipeline.py torch [--reps 5]  # prints one JSON line

PyTorch runs make_tiny_sd.generate, the PyTorch pipeline that wrote the case's reference latents (CFG
with a batched uncond/cond UNet pass, the scheduler in numpy, the VAE decode), on the networks
make_tiny_sd builds, whose weights are the ONNX files' (the script is deterministic). `prepare` writes
what kiln's tokenizer and noise generator and the scheduler give that case (token ids, the first
latents, the Euler schedule), so the ONNX Runtime run does the same arithmetic in JavaScript. Every
runner's final latents are checked against the case's reference (run.py reports the largest error).
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

sys.path.insert(0, os.path.join(models.ROOT, "tools"))
import clip_bpe  # noqa: E402
import kiln_rng  # noqa: E402
import make_tiny_sd as tiny  # noqa: E402
import scheduler_ref  # noqa: E402

PIPELINE = os.path.join(models.ROOT, "tests", "models", "tiny-sd")
CASE = os.path.join(PIPELINE, "reference", "batch_steps_20")
OUT = os.path.join(models.OUT, "tiny_sd")


def case():
    with open(os.path.join(CASE, "case.json")) as f:
        c = json.load(f)
    assert c["scheduler"] == "euler" and not c["negative_prompt"], "ort_pipeline.js runs Euler with an empty negative"
    return c


def reference_latents():
    return np.load(os.path.join(CASE, "trajectory.npy"))[-1]


def prepare():
    """ids.npy [2, 77] (negative, prompt), latents.npy (the first latents, noise times the initial sigma)
    and schedule.json (timesteps, sigmas, guidance, the VAE's scaling factor) under bench/out/compare/tiny_sd."""
    c = case()
    os.makedirs(OUT, exist_ok=True)
    tokenizer = clip_bpe.ClipTokenizer(os.path.join(PIPELINE, "tokenizer"))
    ids = np.array([tokenizer(c["negative_prompt"], tiny.MAX_LENGTH), tokenizer(c["prompt"], tiny.MAX_LENGTH)],
                   dtype=np.int64)
    sched = scheduler_ref.make("euler", dict(tiny.SCHEDULER_CONFIG))
    sched.set_timesteps(c["steps"])
    shape = (1, tiny.LATENT_CHANNELS, c["height"] // 8, c["width"] // 8)
    noise = kiln_rng.normals(c["seed"], 0, int(np.prod(shape))).reshape(shape)
    np.save(os.path.join(OUT, "ids.npy"), ids)
    np.save(os.path.join(OUT, "latents.npy"), (noise * np.float32(sched.init_noise_sigma)).astype(np.float32))
    with open(os.path.join(OUT, "schedule.json"), "w") as f:
        json.dump({"timesteps": sched.timesteps.tolist(), "sigmas": sched.sigmas.tolist(),
                   "guidance": c["guidance_scale"], "scaling_factor": tiny.SCALING_FACTOR}, f)


def time_torch(reps, warmup=1):
    c = case()
    tokenizer = clip_bpe.ClipTokenizer(os.path.join(PIPELINE, "tokenizer"))
    text, unet, decoder, encoder = tiny.networks(len(tokenizer.encoder))

    def run():
        return tiny.generate(tokenizer, text, unet, decoder, encoder, c["prompt"], c["negative_prompt"], c["seed"],
                             c["steps"], c["guidance_scale"], c["scheduler"], c["width"], c["height"])
    for _ in range(warmup):
        run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        trajectory, _, _ = run()
        times.append((time.perf_counter() - start) * 1e3)
    return {"ms": times, "median_ms": statistics.median(times),
            "max_error": float(np.abs(trajectory[-1] - reference_latents()).max())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["prepare", "torch"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    if args.what == "prepare":
        prepare()
        return
    torch.set_num_threads(args.threads)  # Debian's torch starts with one
    print(json.dumps(time_torch(args.reps)))


if __name__ == "__main__":
    main()
