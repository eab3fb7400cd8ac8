// The tiny SD pipeline end to end on ONNX Runtime (onnxruntime-node, CPU):
// text encoder, 20 Euler steps of the UNet with classifier-free guidance
// (uncond and cond in one batch of 2), VAE decode and the image's bytes.
// What kiln's tokenizer, noise generator and scheduler give the case comes
// from `pipeline.py prepare` (ids, first latents, schedule); the loop's
// arithmetic is make_tiny_sd.generate's. Prints one JSON line: {"ms": [...],
// "median_ms", "denoise_ms", "max_error"}, the error of the final latents
// against the reference trajectory's last step.
//
//   node bench/compare/ort_pipeline.js tests/models/tiny-sd bench/out/compare/tiny_sd REFERENCE/trajectory.npy
//       [--reps 5] [--threads 2]
'use strict';
const fs = require('fs');
const path = require('path');
const {ort, createSession, readNpy, flag, median, msSince} = require('./ort_common');

async function main() {
  const args = process.argv.slice(2);
  const [pipelineDir, inputsDir, referenceFile] = args;
  const reps = flag(args, '--reps', 5), warmup = flag(args, '--warmup', 1), threads = flag(args, '--threads', 2);
  const [text, unet, decoder] = await Promise.all(['text_encoder', 'unet', 'vae_decoder'].map(
      (m) => createSession(path.join(pipelineDir, m, 'model.onnx'), threads)));
  const ids = readNpy(path.join(inputsDir, 'ids.npy'));
  const first = readNpy(path.join(inputsDir, 'latents.npy'));
  const schedule = JSON.parse(fs.readFileSync(path.join(inputsDir, 'schedule.json'), 'utf8'));
  const n = first.data.length, shape = first.dims;

  async function generate() {
    const context = (await text.run({input_ids: ids})).last_hidden_state;
    const denoiseStart = process.hrtime.bigint();
    const x = Float32Array.from(first.data);
    const modelIn = new Float32Array(2 * n), guided = new Float32Array(n);
    for (let i = 0; i < schedule.timesteps.length; i++) {
      const sigma = schedule.sigmas[i], next = schedule.sigmas[i + 1], t = schedule.timesteps[i];
      const scale = 1 / Math.sqrt(sigma * sigma + 1);
      for (let j = 0; j < n; j++) modelIn[j] = modelIn[n + j] = x[j] * scale;
      const out = (await unet.run({
        sample: new ort.Tensor('float32', modelIn, [2, ...shape.slice(1)]),
        timestep: new ort.Tensor('float32', Float32Array.of(t, t), [2]),
        encoder_hidden_states: context,
      })).out_sample.data;
      for (let j = 0; j < n; j++) guided[j] = out[j] + schedule.guidance * (out[n + j] - out[j]);
      for (let j = 0; j < n; j++) {  // Euler, epsilon prediction
        const x0 = x[j] - sigma * guided[j];
        x[j] = x[j] + ((x[j] - x0) / sigma) * (next - sigma);
      }
    }
    const denoiseMs = msSince(denoiseStart);
    const latent = x.map((v) => v / schedule.scaling_factor);
    const image = (await decoder.run({latent_sample: new ort.Tensor('float32', latent, shape)})).sample.data;
    const pixels = Uint8Array.from(image, (v) => Math.round(Math.min(Math.max(v / 2 + 0.5, 0), 1) * 255));
    return {latents: x, denoiseMs, pixels};
  }

  for (let i = 0; i < warmup; i++) await generate();
  const ms = [], denoise = [];
  let last;
  for (let i = 0; i < reps; i++) {
    const start = process.hrtime.bigint();
    last = await generate();
    ms.push(msSince(start));
    denoise.push(last.denoiseMs);
  }
  const reference = readNpy(referenceFile).data;  // [steps, 1, 4, h, w]: the last n floats
  let maxError = 0;
  for (let j = 0; j < n; j++) maxError = Math.max(maxError, Math.abs(last.latents[j] - reference[reference.length - n + j]));
  console.log(JSON.stringify({ms, median_ms: median(ms), denoise_ms: median(denoise), max_error: maxError}));
}

main().catch((e) => { console.error(`ort_pipeline: ${e.message}`); process.exit(1); });
