"""The few-step way at full size: an SD-Turbo-shaped single file (SD 2.1's architecture, random weights) making
one 512x512 image in one step without guidance, as SD-Turbo is run, end to end, in f32 and bf16; beside it,
in the same run, the same one-step image with classifier-free guidance (the UNet at batch 2), which gives the
ratio guidance-off buys. Writes the section between its markers in bench/results.md and
bench/out/sd21/results.json.

    tools/build.sh
    /usr/bin/python3 bench/compare/few_step.py [--rounds 2]

The file, never committed, is written on first use into bench/out/sd21 by tools/make_tiny_checkpoints.py
--full sd21 (f16, 2.6 GB). Each generation is its own `kiln generate --profile` process on 2 threads, the
configurations in turn, the order reversed each round; figures are the rounds' medians and the ratio the
median of the rounds' ratios. End to end is the process's wall time: reading the file, building and
compiling the graphs, the text encoder, the step and the VAE decode.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as compare  # noqa: E402
import sd15_checkpoint  # noqa: E402

ROOT = compare.ROOT
OUT = os.path.join(ROOT, "bench", "out", "sd21")
CHECKPOINT = os.path.join(OUT, "sd21.safetensors")
MARK_BEGIN = "<!-- few-step: written by bench/compare/few_step.py -->"
MARK_END = "<!-- /few-step -->"
# SD-Turbo's way: one step from pure noise (trailing: t = 999), no guidance; the prediction type does not
# change the cost (SD 2.x single files default to v-prediction and 768 pixels).
TURBO = ["--width", "512", "--height", "512", "--scheduler", "euler_a", "--timestep-spacing", "trailing",
         "--prediction", "eps"]
CONFIGS = {"unguided bf16": ("bf16", ["-g", "0"]), "guided bf16": ("bf16", ["-g", "7.5"]),
           "unguided f32": ("f32", ["-g", "0"]), "guided f32": ("f32", ["-g", "7.5"])}
FIELDS = ("wall_ms", "load_ms", "text_encoder_ms", "compile_ms", "step_ms", "vae_decode_ms", "peak_rss_mib")


def prepare(log):
    if not os.path.exists(CHECKPOINT):
        log("writing the full-size SD 2.1 single file (f16)")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_tiny_checkpoints.py"), "--full", "sd21",
                        "--out", CHECKPOINT, "--dtype", "f16"], check=True)
    # The tiny test tokenizer beside the file: its ids are valid for any CLIP embedding.
    tokenizer = os.path.join(OUT, "tokenizer")
    os.makedirs(tokenizer, exist_ok=True)
    for table in ("vocab.json", "merges.txt"):
        with open(os.path.join(ROOT, "tests", "models", "sd-checkpoints", "tokenizer", table), "rb") as f:
            data = f.read()
        with open(os.path.join(tokenizer, table), "wb") as f:
            f.write(data)


def measure(rounds, log):
    runs = {name: [] for name in CONFIGS}
    for k in range(rounds):
        for name in (list(CONFIGS) if k % 2 == 0 else list(CONFIGS)[::-1]):
            precision, flags = CONFIGS[name]
            runs[name].append(sd15_checkpoint.generation(precision, 1, log, CHECKPOINT, TURBO + flags))
    results = {}
    for name, rows in runs.items():
        results[name] = {f: statistics.median(r[f] for r in rows) for f in FIELDS}
        results[name]["rounds"] = rows
    for precision in ("bf16", "f32"):
        pairs = zip(runs[f"guided {precision}"], runs[f"unguided {precision}"])
        results[f"unguided {precision}"]["step_ratio"] = statistics.median(g["step_ms"] / u["step_ms"]
                                                                           for g, u in pairs)
    return results


def section(run):
    r = run["results"]
    lines = [MARK_BEGIN, "## Few steps without guidance: SD-Turbo's shape, 512x512, one step", "",
             f"Measured by `{run['command']}` on {run['when']} (kiln {run['rev']}), {run['machine']}; "
             f"{run['rounds']} rounds, each configuration its own `kiln generate --profile` process on 2 threads, "
             "in turn, the order reversed each round; the medians of the rounds. The model: SD 2.1's "
             "architecture (SD-Turbo's) with random weights (tools/make_tiny_checkpoints.py --full sd21), a "
             "single f16 .safetensors file (2.6 GB). One 512x512 image in one step of euler_a from t = 999 "
             "(`--timestep-spacing trailing`), graph-loop; end to end is the process's wall time, from reading "
             "the file to the PNG.", "",
             "| configuration | end to end ms | load ms | text encoder ms | compile ms | step ms | VAE decode ms "
             "| peak RSS MiB |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, v in r.items():
        lines.append(f"| {name} | {v['wall_ms']:.0f} | {v['load_ms']:.0f} | {v['text_encoder_ms']:.0f} | "
                     f"{v['compile_ms']:.0f} | {v['step_ms']:.0f} | {v['vae_decode_ms']:.0f} | "
                     f"{v['peak_rss_mib']:.0f} |")
    lines += ["", "Guidance off (`-g 0`, SD-Turbo's setting) runs the UNet once a step on the prompt alone "
              f"instead of on [uncond, cond]: the step takes {r['unguided bf16']['step_ratio']:.2f}x less time in "
              f"bf16 and {r['unguided f32']['step_ratio']:.2f}x in f32 (the medians of the rounds' ratios).",
              MARK_END, ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the configurations")
    parser.add_argument("--report-only", action="store_true", help="write the section again from results.json")
    args = parser.parse_args()
    saved = os.path.join(OUT, "results.json")
    results_md = os.path.join(ROOT, "bench", "results.md")
    if args.report_only:
        with open(saved) as f:
            sd15_checkpoint.write_section(section(json.load(f)), results_md, MARK_BEGIN, MARK_END)
        return

    def log(what):
        print(f"[{datetime.datetime.now().strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)

    if not os.path.exists(compare.KILN):
        sys.exit("few_step: build/kiln is missing: run tools/build.sh first")
    os.makedirs(OUT, exist_ok=True)
    prepare(log)
    run = {"command": "python3 bench/compare/few_step.py" + "".join(f" {a}" for a in sys.argv[1:]),
           "when": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "rev": compare.git_rev(),
           "machine": f"{compare.cpu_name()}, {os.cpu_count()} cores", "rounds": args.rounds,
           "results": measure(args.rounds, log)}
    with open(saved, "w") as f:
        json.dump(run, f, indent=1)
    sd15_checkpoint.write_section(section(run), results_md, MARK_BEGIN, MARK_END)
    log(f"wrote the section of {results_md}")


if __name__ == "__main__":
    main()
