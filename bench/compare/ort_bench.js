// Times one ONNX Runtime (CPU, from the npm package onnxruntime-node) run of
// a bench/compare model and prints one JSON line: {"ms": [...], "median_ms"}
// (run.py measures the process's peak RSS). All graph optimizations on, 2
// intra-op threads (one per core of the machines this is measured on),
// sequential execution.
//
//   node bench/compare/ort_bench.js bench/out/compare/NAME [--iters 5] [--threads 2]
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));

// A .npy file (version 1, little-endian f4/i8/f8, C order) as an ort.Tensor.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString('latin1', 10, 10 + headerLen);
  const descr = /'descr': '([^']+)'/.exec(header)[1];
  const shape = /'shape': \(([^)]*)\)/.exec(header)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = buf.subarray(10 + headerLen);
  const copy = new Uint8Array(data).buffer;  // aligned
  if (descr === '<f4') return new ort.Tensor('float32', new Float32Array(copy), shape);
  if (descr === '<i8') return new ort.Tensor('int64', new BigInt64Array(copy), shape);
  throw new Error(`${file}: unsupported dtype ${descr}`);
}

async function main() {
  const args = process.argv.slice(2);
  const dir = args[0];
  const flag = (name, dflt) => (args.indexOf(name) >= 0 ? Number(args[args.indexOf(name) + 1]) : dflt);
  const iters = flag('--iters', 5), warmup = flag('--warmup', 1), threads = flag('--threads', 2);
  const session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), {
    graphOptimizationLevel: 'all', intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential'});
  const feeds = {};
  for (const name of session.inputNames) feeds[name] = readNpy(path.join(dir, 'inputs', `${name}.npy`));
  for (let i = 0; i < warmup; i++) await session.run(feeds);
  const ms = [];
  for (let i = 0; i < iters; i++) {
    const start = process.hrtime.bigint();
    await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  const sorted = [...ms].sort((a, b) => a - b);
  const median = sorted.length % 2 ? sorted[(sorted.length - 1) / 2] : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
  console.log(JSON.stringify({ms, median_ms: median}));
}

main().catch((e) => { console.error(`ort_bench: ${e.message}`); process.exit(1); });
