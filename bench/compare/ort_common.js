// What ort_bench.js and ort_pipeline.js share: onnxruntime-node from
// bench/compare/node_modules, the session options every ONNX Runtime run in
// bench/compare uses (all graph optimizations on, `threads` intra-op threads,
// sequential execution), .npy inputs and a median.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));

function createSession(file, threads) {
  return ort.InferenceSession.create(file, {
    graphOptimizationLevel: 'all', intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential'});
}

// A .npy file (version 1, little-endian f4/i8, C order) as an ort.Tensor.
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

// A numeric flag's value from argv (`--name N`), else `dflt`.
function flag(args, name, dflt) {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
}

function median(values) {
  const s = [...values].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

function msSince(start) { return Number(process.hrtime.bigint() - start) / 1e6; }

module.exports = {ort, createSession, readNpy, flag, median, msSince};
