"""kiln against PyTorch and ONNX Runtime on the same ONNX files, back to back in one run; writes
bench/results.md (medians, ratios to ONNX Runtime, GFLOP/s, % of peak, peak RSS, the issue's targets)
and bench/results.png (a bar chart).

    bash tools/setup_compare.sh          # once: PyTorch on OpenBLAS, matplotlib, onnxruntime-node
    tools/build.sh                       # build/kiln and build/bench/kiln_bench_pipeline
    /usr/bin/python3 bench/compare/run.py [--only dit_tiny dit_small] [--iters-scale 1] [--rounds 2]

Every measurement is its own process (its peak RSS is its own), on 2 threads: kiln eager and graph in
f32 and bf16; PyTorch eager and TorchScript (trace + freeze + optimize_for_inference) in f32 on
OpenBLAS (on the fastest of its kernel sets for this CPU, see openblas_core), and eager in bf16 both
with its default kernels and with ATEN_CPU_CAPABILITY=avx512, keeping the faster; ONNX Runtime's CPU provider (onnxruntime-node) with every graph optimization. The tiny SD
pipeline's reference case runs end to end (`--only tiny_sd_pipeline`) in kiln's three modes, PyTorch and
ONNX Runtime (bench/compare/pipeline.py). FLOPs and the peaks are kiln's (`kiln bench`). A model's
runners run in turn, in rounds (the order reversed each round, so that a drift in a shared machine's
speed hits all alike), and each runner's median is over all its timed runs. kiln graph f32 runs next to
ONNX Runtime, kiln graph bf16 next to PyTorch bf16, and a target's ratio is the median of the rounds'
ratios (those two measured seconds apart, not minutes: kiln's and ONNX Runtime's pooled medians once
moved 35 % and 2 % between rounds). Last, `kiln profile` of kiln graph f32 and bf16 says where their time goes (per op
kind and the slowest steps).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

ROOT = models.ROOT
KILN = os.path.join(ROOT, "build", "kiln")
THREADS = "2"
# Timed runs per measurement (a warm-up run first): more where a run is short.
PIPELINE = "tiny_sd_pipeline"  # --only's name for the tiny SD pipeline end to end
ITERS = {"dit_tiny": 50, "dit_small": 20, "clip_l": 10, "vae_decoder_256": 4, "unet_sd15": 4, "dit_medium": 3}
# Rounds per model (--rounds overrides): more for the small models, whose rounds take seconds, and for
# the medium DiT, whose ratio to ONNX Runtime sits by its target (two rounds once gave 1.31x and 1.15x).
# The small DiT's ratio sits by its target too (its 4 rounds once spread 1.32x-1.47x): 8 rounds of 20
# runs, about 4 minutes.
ROUNDS = {"dit_tiny": 4, "dit_small": 8, "dit_medium": 4}
DEFAULT_ROUNDS = 2
# The order runners run in (reversed every other round): kiln graph f32 next to ONNX Runtime, kiln graph
# bf16 next to PyTorch bf16 (avx512; default two away) and one away from ONNX Runtime. The targets against
# PyTorch f32 (see TARGETS) pair runners further apart.
RUN_ORDER = ["kiln eager f32", "kiln eager bf16", "PyTorch eager f32", "TorchScript f32",
             "PyTorch eager bf16 default", "PyTorch eager bf16 avx512", "kiln graph bf16", "kiln graph f32",
             "ONNX Runtime f32"]


def run_measured(cmd, env=None, timeout=3600):
    """Runs cmd under /usr/bin/time; returns (stdout, the process's peak RSS in MiB)."""
    full_env = dict(os.environ, OMP_NUM_THREADS=THREADS, **(env or {}))
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, env=full_env, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return proc.stdout, int(proc.stderr.strip().splitlines()[-1]) / 1024


def kiln_args(name):
    """The model file and its --input flags."""
    folder = os.path.join(models.OUT, name)
    inputs = [a for f in sorted(os.listdir(os.path.join(folder, "inputs")))
              for a in ("--input", f"{f[:-4]}={os.path.join(folder, 'inputs', f)}")]
    return [os.path.join(folder, "model.onnx"), *inputs]


def kiln_bench(name, mode, precision, iters):
    out, rss = run_measured([KILN, "bench", *kiln_args(name), "--modes", mode, "--precision", precision,
                             "--iters", str(iters), "--warmup", "1", "--json"])
    j = json.loads(out)
    return {"ms": j["modes"][mode]["ms"], "peak_rss_mib": rss, "json": j}


def kiln_profile(name, precision, replays):
    """`kiln profile --json` of graph mode: per op kind and the slowest steps, each step's median of `replays`."""
    out, _ = run_measured([KILN, "profile", *kiln_args(name), "--precision", precision, "--iters", str(replays),
                           "--top", "3", "--json"])
    return json.loads(out)


def openblas_core(log):
    """Picks the OpenBLAS kernels PyTorch runs f32 on, as OPENBLAS_CORETYPE for every PyTorch process.
    OpenBLAS chooses them by CPU model, and an OPENBLAS_CORETYPE already in the environment overrides its
    choice (a shell here had Haswell set: AVX2 kernels, at 0.65x the speed of OpenBLAS's own pick on a
    Zen 5). So OpenBLAS's own pick is timed against each kernel set this CPU runs, on one sgemm of the
    medium DiT's MLP shape, and the fastest kept. Returns a line for the report."""
    probe = ("import time, torch; torch.set_num_threads(" + THREADS + "); "
             "a, b = torch.randn(2048, 1152), torch.randn(1152, 4608); [a @ b for _ in range(2)]; "
             "t = time.perf_counter(); [a @ b for _ in range(5)]; "
             "print(5 * 2 * 2048 * 1152 * 4608 / (time.perf_counter() - t) / 1e9)")
    inherited = os.environ.pop("OPENBLAS_CORETYPE", None)  # one set by the caller is timed, not obeyed
    with open("/proc/cpuinfo") as f:
        flags = set(re.search(r"flags\s*:\s*(.*)", f.read()).group(1).split())
    rates = {}
    for core in (None, "Haswell", "Zen", *(["SkylakeX"] if "avx512f" in flags else [])):
        env = dict(os.environ, OMP_NUM_THREADS=THREADS, OPENBLAS_VERBOSE="2")
        if core:
            env["OPENBLAS_CORETYPE"] = core
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
        name = re.search(r"Core: (\w+)", proc.stdout + proc.stderr)
        rates[core] = (float(proc.stdout.strip().splitlines()[-1]), name.group(1) if name else "?")
    default_rate, default_name = rates.pop(None)
    best = max(rates, key=lambda c: rates[c][0])
    timed = ", ".join(f"{c} {r:.0f}" for c, (r, _) in rates.items())
    if rates[best][0] <= default_rate:
        line = f"OpenBLAS's own pick of kernels, {default_name} (sgemm 2048x4608x1152, GFLOP/s: " \
            f"{default_rate:.0f}; {timed})"
    else:
        os.environ["OPENBLAS_CORETYPE"] = best
        line = f"OPENBLAS_CORETYPE={best}, the fastest kernel set on one sgemm (2048x4608x1152, GFLOP/s: " \
            f"{timed}; OpenBLAS's own pick, {default_name}, {default_rate:.0f})"
    if inherited:
        line += f"; OPENBLAS_CORETYPE={inherited} in the caller's environment, overridden"
    log(f"PyTorch f32 on {line}")
    return line


def torch_bench(name, mode, dtype, iters, env=None):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "compare", "torch_bench.py"), name, "--mode", mode,
           "--dtype", dtype, "--iters", str(iters), "--threads", THREADS]
    out, rss = run_measured(cmd, env)
    return dict(json.loads(out.strip().splitlines()[-1]), peak_rss_mib=rss)


def ort_bench(name, iters):
    cmd = ["node", os.path.join(ROOT, "bench", "compare", "ort_bench.js"), os.path.join(models.OUT, name),
           "--iters", str(iters), "--threads", THREADS]
    out, rss = run_measured(cmd)
    return dict(json.loads(out.strip().splitlines()[-1]), peak_rss_mib=rss)


def pipeline_bench(reps=10):
    """The tiny SD pipeline's reference case end to end: kiln's three modes (one process), PyTorch and
    ONNX Runtime; each runner's median ms, and its final latents' largest error against the reference."""
    import numpy as np
    import pipeline
    pipeline.prepare()
    c, reference = pipeline.case(), pipeline.reference_latents()
    latents_dir = os.path.join(pipeline.OUT, "kiln-latents")
    os.makedirs(latents_dir, exist_ok=True)
    exe = os.path.join(ROOT, "build", "bench", "kiln_bench_pipeline")
    out, _ = run_measured([exe, "--model", pipeline.PIPELINE, "--steps", str(c["steps"]), "--prompt", c["prompt"],
                           "--seed", str(c["seed"]), "--reps", str(reps), "--save-latents", latents_dir,
                           "--json"])
    rows = {}
    for mode, got in json.loads(out.strip().splitlines()[-1])["modes"].items():
        error = np.abs(np.load(os.path.join(latents_dir, mode + ".npy")) - reference).max()
        rows[f"kiln {mode} f32"] = {"median_ms": got["total_ms"], "denoise_ms": got["denoise_ms"],
                                    "max_error": float(error)}
    out, _ = run_measured([sys.executable, os.path.join(ROOT, "bench", "compare", "pipeline.py"), "torch",
                           "--reps", str(reps), "--threads", THREADS])
    rows["PyTorch eager f32"] = json.loads(out.strip().splitlines()[-1])
    out, _ = run_measured(["node", os.path.join(ROOT, "bench", "compare", "ort_pipeline.js"), pipeline.PIPELINE,
                           pipeline.OUT, os.path.join(pipeline.CASE, "trajectory.npy"), "--reps", str(reps),
                           "--threads", THREADS])
    rows["ONNX Runtime f32"] = json.loads(out.strip().splitlines()[-1])
    return {"case": c, "runners": rows, "reference_max": float(np.abs(reference).max())}


def measure(name, scale, rounds, log):
    """Every runner on one model, `rounds` times over, in turn (RUN_ORDER, reversed each round, so a drift
    in the machine's speed hits all alike); each runner's timed runs pooled, its median over them all, and
    its median in each round kept (round_ms) for the paired ratios. Then kiln graph's profiles, f32 and bf16."""
    iters = max(1, round(ITERS[name] * scale))
    runners = [(f"kiln {mode} {precision}", lambda m=mode, p=precision: kiln_bench(name, m, p, iters))
               for precision in ("f32", "bf16") for mode in ("eager", "graph")]
    runners += [("PyTorch eager f32", lambda: torch_bench(name, "eager", "f32", iters)),
                ("TorchScript f32", lambda: torch_bench(name, "torchscript", "f32", iters)),
                ("PyTorch eager bf16 default", lambda: torch_bench(name, "eager", "bf16", iters)),
                ("PyTorch eager bf16 avx512",
                 lambda: torch_bench(name, "eager", "bf16", iters, {"ATEN_CPU_CAPABILITY": "avx512"})),
                ("ONNX Runtime f32", lambda: ort_bench(name, iters))]
    assert sorted(RUN_ORDER) == sorted(runner for runner, _ in runners)
    order = sorted(runners, key=lambda runner: RUN_ORDER.index(runner[0]))
    pooled = {}
    for r in range(rounds):
        for runner, run in (order if r % 2 == 0 else order[::-1]):
            log(f"{name}: {runner} (round {r + 1} of {rounds})")
            got = run()
            into = pooled.setdefault(runner, dict(got, ms=[], round_ms=[]))
            into["ms"] += got["ms"]
            into["round_ms"].append(statistics.median(got["ms"]))
            into["peak_rss_mib"] = max(into["peak_rss_mib"], got["peak_rss_mib"])
    for r in pooled.values():
        r["median_ms"] = statistics.median(r["ms"])
    # PyTorch bf16: the faster of its default kernels and ATEN_CPU_CAPABILITY=avx512.
    default, avx512 = pooled.pop("PyTorch eager bf16 default"), pooled.pop("PyTorch eager bf16 avx512")
    best, kernels, other = (default, "default", avx512) if default["median_ms"] <= avx512["median_ms"] else \
        (avx512, "avx512", default)
    results = {}  # in the runners' order, the two PyTorch bf16 runs as one
    for runner, _ in runners:
        if runner in pooled:
            results[runner] = pooled[runner]
        elif runner == "PyTorch eager bf16 default":
            results["PyTorch eager bf16"] = dict(best, kernels=kernels, other_ms=other["median_ms"])
    profiles = {}
    for precision in ("f32", "bf16"):
        log(f"{name}: kiln profile {precision}")
        profiles[precision] = kiln_profile(name, precision, min(iters, 5))
    return results, profiles


# ------------------------------------------------------------------------------------------- report

TARGETS = [  # (model, runner, baseline, at least, what)
    *[(m, "kiln graph f32", "ONNX Runtime f32", 1.25, "fp32 graph vs ONNX Runtime") for m in ("dit_medium", "unet_sd15")],
    *[(m, "kiln graph f32", "PyTorch eager f32", 2.0, "fp32 graph vs PyTorch eager") for m in ("dit_medium", "unet_sd15")],
    ("dit_small", "kiln graph f32", "ONNX Runtime f32", 1.4, "fp32 graph vs ONNX Runtime"),
    ("dit_tiny", "kiln graph f32", "ONNX Runtime f32", 2.0, "fp32 graph vs ONNX Runtime (per-op overhead)"),
    *[(m, "kiln graph bf16", "PyTorch eager bf16", 3.0, "bf16 graph vs PyTorch bf16 eager") for m in ("dit_medium", "unet_sd15")],
    *[(m, "kiln graph bf16", "ONNX Runtime f32", 5.0, "bf16 graph vs ONNX Runtime fp32") for m in ("dit_medium", "unet_sd15")],
]


def percent_of_peak(results, runner, flops):
    j = results.get(runner, {}).get("json")
    if not j or "peak" not in j:
        return None
    return 100 * flops / (results[runner]["median_ms"] * 1e6) / j["peak"]["gflops_per_s"]


def time_goes(results, profiles):
    """Where kiln graph's time goes, a paragraph each for f32 and bf16: from `kiln profile` (per op kind with
    the products' GFLOP/s, and the slowest steps). A results.json written before bf16 was profiled holds
    f32's profile alone, and one from before profiles were kept the bench's one profiled run."""
    if not profiles:
        graph = results["kiln graph f32"]["json"]["profiled_replay_ms_by_op"]
        total = sum(graph.values())
        return ["Where kiln graph f32's time goes (one profiled run, per op kind): " + ", ".join(
            f"{op} {ms / total * 100:.0f} %" for op, ms in sorted(graph.items(), key=lambda kv: -kv[1])[:6]) + "."]
    if "ops" in profiles:
        profiles = {"f32": profiles}

    def rate(row):
        return f" at {row['gflops_per_s']:.0f} GFLOP/s" if "gflops_per_s" in row else ""
    paragraphs = []
    for precision, profile in profiles.items():
        ops = ", ".join(f"{r['op']} {r['percent']:.0f} %{rate(r)}" for r in profile["ops"][:6])
        steps = "; ".join(f"{r['node']} ({r['op']}, {r['ms']:.3g} ms{rate(r)})" for r in profile["slowest_steps"])
        paragraphs.append(f"Where kiln graph {precision}'s time goes (`kiln profile`, each step's median of "
                          f"{profile['replays']} replays), per op kind: {ops}. Slowest steps: {steps}.")
    return paragraphs


def paired_ratio(results, runner, base):
    """The baseline's median over the runner's, as the median of the rounds' ratios where both kept their
    rounds' medians (see measure), with those ratios; else (a results.json from before) of the pooled
    medians, with none."""
    a, b = results[runner].get("round_ms"), results[base].get("round_ms")
    if not a or not b or len(a) != len(b):
        return results[base]["median_ms"] / results[runner]["median_ms"], []
    per_round = [base_ms / ms for ms, base_ms in zip(a, b)]
    return statistics.median(per_round), per_round


def describe_rounds(rounds):
    """--rounds as the report says it: one number, or each count with its models."""
    if isinstance(rounds, int):
        return f"{rounds} rounds"
    counts = sorted(set(rounds.values()), reverse=True)
    if len(counts) == 1:
        return f"{counts[0]} rounds"
    return " or ".join(f"{c} ({', '.join(m for m, n in rounds.items() if n == c)})" for c in counts) + " rounds"


def write_report(all_results, pipeline, path_md, path_png, command, when, rev, rounds, openblas, profiles):
    lines = ["# kiln vs PyTorch vs ONNX Runtime", "",
             f"Measured by `{command}` on {when}; every figure",
             "below comes from that one run, measurements back to back, each in its own process on",
             f"{THREADS} threads. Machine: {cpu_name()}, {os.cpu_count()} cores; {platform.platform()}.",
             f"kiln {rev}; {versions()}.",
             f"PyTorch f32 ran on {openblas or 'OpenBLAS (its kernel set not recorded)'}.", "",
             f"Medians of the timed runs of {describe_rounds(rounds)}: each process after one",
             "warm-up, a model's runners in turn, the order reversed each round. `vs ORT`: ONNX Runtime's",
             "median over this one's (above 1: faster). GFLOP/s: the matmul, convolution and attention",
             "FLOPs kiln counts for the model (a convolution's as computed directly), over the median.",
             "% of peak: of the oneDNN",
             "matmul peak kiln measures on this machine (f32, or bf16 for bf16 runs); above 100 % where",
             "kiln runs 3x3 convolutions by Winograd's F(2x2, 3x3) or (f32) F(4x4, 3x3), 2.25x or 4x fewer",
             "multiplications.",
             "Peak RSS: the process's maximum resident memory.", ""]
    peaks = {}
    for name, results in all_results.items():
        flops = next(r["json"]["flops_per_forward"] for k, r in results.items() if k.startswith("kiln"))
        ort = results["ONNX Runtime f32"]["median_ms"]
        lines += [f"## {name}", "", models.MODELS[name][1] + f"; {flops / 1e9:.3g} GFLOP per forward.", "",
                  "| runner | median ms | vs ORT | GFLOP/s | % of peak | peak RSS MiB |",
                  "|---|---:|---:|---:|---:|---:|"]
        for runner, r in results.items():
            pct = percent_of_peak(results, runner, flops)
            if "json" in r and "peak" in r["json"]:
                peaks[r["json"]["peak"]["dtype"]] = r["json"]["peak"]["gflops_per_s"]
            note = f" ({r['kernels']} kernels; the other {r['other_ms']:.1f} ms)" if "kernels" in r else ""
            lines.append(f"| {runner}{note} | {r['median_ms']:.2f} | {ort / r['median_ms']:.2f}x | "
                         f"{flops / (r['median_ms'] * 1e6):.1f} | {'' if pct is None else f'{pct:.1f}'} | "
                         f"{r['peak_rss_mib']:.0f} |")
        for paragraph in time_goes(results, (profiles or {}).get(name)):
            lines += ["", paragraph]
        lines.append("")
    if peaks:
        lines += ["Measured peaks: " + ", ".join(f"{d} {g:.0f} GFLOP/s" for d, g in sorted(peaks.items())) + ".", ""]
    if pipeline:
        c, rows = pipeline["case"], pipeline["runners"]
        ort = rows["ONNX Runtime f32"]["median_ms"]
        lines += ["## tiny SD pipeline, end to end", "",
                  f"tests/models/tiny-sd's reference case batch_steps_20 (\"{c['prompt']}\", seed {c['seed']}, "
                  f"{c['steps']} {c['scheduler']} steps, guidance {c['guidance_scale']}, {c['width']}x{c['height']}): "
                  "tokenizer, text encoder, the denoise loop (CFG as one batch of 2) and the VAE decode. kiln: "
                  "`build/bench/kiln_bench_pipeline`; PyTorch: `bench/compare/pipeline.py` (the pipeline that wrote "
                  "the reference); ONNX Runtime: `bench/compare/ort_pipeline.js` (the loop in JavaScript). Error: "
                  "the final latents' largest difference from the reference's (whose largest magnitude is "
                  f"{pipeline['reference_max']:.1f}).", "",
                  "| runner | end to end ms | vs ORT | denoise ms | ms per step | error |",
                  "|---|---:|---:|---:|---:|---:|"]
        for runner, r in rows.items():
            denoise, per_step = "", ""
            if "denoise_ms" in r:
                denoise, per_step = f"{r['denoise_ms']:.2f}", f"{r['denoise_ms'] / c['steps']:.3f}"
            lines.append(f"| {runner} | {r['median_ms']:.2f} | {ort / r['median_ms']:.2f}x | {denoise} | {per_step} | "
                         f"{r['max_error']:.1e} |")
        lines.append("")
    lines += ["## Targets", "",
              "A speed target's ratio is paired: the median of the rounds' ratios, each of the two runners'",
              "medians in one round (`rounds`: those ratios); kiln graph f32 runs next to ONNX Runtime, kiln",
              "graph bf16 next to PyTorch bf16. The tables above pool every round, and a shared machine's",
              "slow minutes can fall on one runner's runs and not the other's. `needs`: the share of the measured matmul peak kiln's run would have to reach to meet",
              "the target (its FLOPs over the baseline's median divided by the ratio); above 100 % no kernel",
              "can meet it on this machine. Where kiln's run spends its time, f32 and bf16: the model's",
              "section above.", "",
              "| model | target | measured | | needs | rounds |", "|---|---|---:|---|---:|---|"]
    for model, runner, base, want, what in TARGETS:
        if model not in all_results:
            continue
        results = all_results[model]
        got, per_round = paired_ratio(results, runner, base)
        verdict = "met" if got >= want else f"missed by {(1 - got / want) * 100:.0f} %"
        now = percent_of_peak(results, runner, results[runner]["json"]["flops_per_forward"])
        pooled = results[base]["median_ms"] / results[runner]["median_ms"]  # the one `now` is measured at
        needs = f"{now * want / pooled:.0f} % of peak" if now is not None else ""
        lines.append(f"| {model} | {what} >= {want}x | {got:.2f}x | {verdict} | {needs} | "
                     f"{', '.join(f'{x:.2f}' for x in per_round)} |")
    for model, results in all_results.items():
        for runner in ("kiln graph f32", "kiln graph bf16"):
            rss, ort_rss = results[runner]["peak_rss_mib"], results["ONNX Runtime f32"]["peak_rss_mib"]
            verdict = "met" if rss <= ort_rss else f"missed by {(rss / ort_rss - 1) * 100:.0f} %"
            lines.append(f"| {model} | {runner} peak RSS <= ONNX Runtime's | {rss:.0f} vs {ort_rss:.0f} MiB | {verdict} | | |")
        if model == "dit_medium":
            flops = results["kiln graph f32"]["json"]["flops_per_forward"]
            for runner, want in (("kiln graph f32", 80), ("kiln graph bf16", 60)):
                pct = percent_of_peak(results, runner, flops)
                if pct is not None:
                    verdict = "met" if pct >= want else f"missed by {want - pct:.0f} points"
                    lines.append(f"| {model} | {runner} >= {want} % of peak | {pct:.1f} % | {verdict} | | |")
    lines.append("")
    # Sections other scripts write (bench/compare/sd15_checkpoint.py's) stay.
    kept = ""
    if os.path.exists(path_md):
        with open(path_md) as f:
            old = f.read()
        begin = old.find("<!-- sd15-checkpoint:")
        if begin >= 0:
            kept = "\n" + old[begin:]
    with open(path_md, "w") as f:
        f.write("\n".join(lines) + kept)
    plot(all_results, path_png)


def plot(all_results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runners = ["kiln graph f32", "kiln graph bf16", "PyTorch eager f32", "TorchScript f32", "PyTorch eager bf16",
               "ONNX Runtime f32"]
    names = list(all_results)
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(names)), 4.5))
    width = 0.8 / len(runners)
    for i, runner in enumerate(runners):
        speed = [all_results[n]["ONNX Runtime f32"]["median_ms"] / all_results[n][runner]["median_ms"] for n in names]
        ax.bar([x + (i - len(runners) / 2 + 0.5) * width for x in range(len(names))], speed, width, label=runner)
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylabel("speed vs ONNX Runtime f32 (x, log)")
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(f"{cpu_name()}, {THREADS} threads")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
    return m.group(1) if m else platform.processor()


def git_rev():
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "(not a git checkout)"


def versions():
    import torch
    with open(os.path.join(ROOT, "bench", "compare", "node_modules", "onnxruntime-node", "package.json")) as f:
        ort = json.load(f)["version"]
    return f"PyTorch {torch.__version__}, ONNX Runtime {ort} (onnxruntime-node)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=[*models.MODELS, PIPELINE], metavar="NAME",
                        help=f"what to run (default: all: {', '.join(models.MODELS)}, {PIPELINE})")
    parser.add_argument("--iters-scale", type=float, default=1.0, help="scale every model's timed runs")
    parser.add_argument("--rounds", type=int, choices=range(1, 11), metavar="N",
                        help=f"times each model's runners run, in turn (default {DEFAULT_ROUNDS}, "
                             f"{', '.join(f'{m} {n}' for m, n in ROUNDS.items())}); their timed runs are pooled")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench"), help="folder for results.md and results.png")
    parser.add_argument("--report-only", action="store_true",
                        help="write the report again from the last run's measurements (bench/out/compare/results.json)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    saved = os.path.join(models.OUT, "results.json")
    if args.report_only:
        with open(saved) as f:
            run = json.load(f)
        write_report(run["results"], run["pipeline"], os.path.join(args.out, "results.md"),
                     os.path.join(args.out, "results.png"), run["command"], run["when"], run["rev"], run["rounds"],
                     run.get("openblas"), run.get("profiles"))
        return
    missing = [p for p in (KILN, os.path.join(ROOT, "bench", "compare", "node_modules", "onnxruntime-node"))
               if not os.path.exists(p)]
    if missing:
        sys.exit(f"compare: missing {', '.join(missing)}: run tools/build.sh and tools/setup_compare.sh first")

    def log(what):
        print(f"[{datetime.datetime.now().strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)

    # The peaks are measured afresh by this run's first f32 and bf16 benches,
    # not read from a cache some other (maybe busier) moment wrote.
    os.environ["KILN_CACHE_DIR"] = os.path.join(models.OUT, "peak-cache")
    shutil.rmtree(os.environ["KILN_CACHE_DIR"], ignore_errors=True)
    openblas = openblas_core(log)
    names = [n for n in args.only or models.MODELS if n != PIPELINE]
    all_results, profiles = {}, {}
    rounds = {n: args.rounds or ROUNDS.get(n, DEFAULT_ROUNDS) for n in names}
    for name in names:
        if not os.path.exists(os.path.join(models.OUT, name, "state.pt")):
            log(f"{name}: exporting")
            models.export(name)
        all_results[name], profiles[name] = measure(name, args.iters_scale, rounds[name], log)
    pipeline = None
    if not args.only or PIPELINE in args.only:
        log("tiny SD pipeline: kiln, PyTorch, ONNX Runtime")
        pipeline = pipeline_bench()
    command = "python3 bench/compare/run.py" + "".join(f" {a}" for a in sys.argv[1:])
    when, rev = datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), git_rev()
    with open(saved, "w") as f:
        json.dump({"results": all_results, "pipeline": pipeline, "command": command, "when": when, "rev": rev,
                   "rounds": rounds, "openblas": openblas, "profiles": profiles}, f)
    write_report(all_results, pipeline, os.path.join(args.out, "results.md"), os.path.join(args.out, "results.png"),
                 command, when, rev, rounds, openblas, profiles)
    log(f"wrote {os.path.join(args.out, 'results.md')} and results.png")


if __name__ == "__main__":
    main()
