// ONNX Runtime's side of an inference comparison: runs a model that
// `classic export --batch N` wrote on random input, with the given
// threads and ORT's full graph optimisation, and prints one line
// `ort: img_s=... ms_per_batch=... rss_mb=...` over the timed runs (peak
// RSS of the node process, as ru_maxrss).
//   node bench/ort_infer.js PREFIX model.onnx N,C,H,W THREADS WARMUP STEPS
// PREFIX holds node_modules/onnxruntime-node (tests/onnx/setup.sh PREFIX).
'use strict';
const path = require('path');

async function main() {
  const [prefix, model, shape, threads, warm, steps] = process.argv.slice(2);
  if (!steps) {
    console.error('usage: ort_infer.js PREFIX model.onnx N,C,H,W THREADS ' +
                  'WARMUP STEPS');
    process.exit(2);
  }
  const ort = require(
      path.join(path.resolve(prefix), 'node_modules', 'onnxruntime-node'));
  const dims = shape.split(',').map(Number);
  const n = dims.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.random() * 2 - 1;
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  const feeds = {input: new ort.Tensor('float32', data, dims)};
  for (let i = 0; i < Number(warm); i++) await session.run(feeds);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < Number(steps); i++) await session.run(feeds);
  const s = Number(process.hrtime.bigint() - t0) / 1e9 / Number(steps);
  console.log(`ort: img_s=${(dims[0] / s).toFixed(3)} ` +
              `ms_per_batch=${(1000 * s).toFixed(1)} threads=${threads} ` +
              `rss_mb=${(process.resourceUsage().maxRSS / 1024).toFixed(1)}`);
}

main().catch((e) => {
  console.error(`ort_infer.js: ${e.message}`);
  process.exit(1);
});
