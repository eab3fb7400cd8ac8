// Times one ONNX Runtime (CPU, from the npm package onnxruntime-node) run of
// a bench/compare model and prints one JSON line: {"ms": [...], "median_ms"}
// (run.py measures the process's peak RSS). All graph optimizations on, 2
// intra-op threads (one per core of the machines this is measured on),
// sequential execution.
//
//   node bench/compare/ort_bench.js bench/out/compare/NAME [--iters 5] [--threads 2]
'use strict';
const path = require('path');
const {createSession, readNpy, flag, median, msSince} = require('./ort_common');

async function main() {
  const args = process.argv.slice(2);
  const dir = args[0];
  const iters = flag(args, '--iters', 5), warmup = flag(args, '--warmup', 1), threads = flag(args, '--threads', 2);
  const session = await createSession(path.join(dir, 'model.onnx'), threads);
  const feeds = {};
  for (const name of session.inputNames) feeds[name] = readNpy(path.join(dir, 'inputs', `${name}.npy`));
  for (let i = 0; i < warmup; i++) await session.run(feeds);
  const ms = [];
  for (let i = 0; i < iters; i++) {
    const start = process.hrtime.bigint();
    await session.run(feeds);
    ms.push(msSince(start));
  }
  console.log(JSON.stringify({ms, median_ms: median(ms)}));
}

main().catch((e) => { console.error(`ort_bench: ${e.message}`); process.exit(1); });
