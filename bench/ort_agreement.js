// ONNX Runtime's side of bench/int8_agreement.sh: runs model.onnx on the
// inputs int8_agreement wrote in DIR (x.bin, shape.txt) in batches of 64,
// and prints ORT's top-1 against labels.bin, classic's (classic.bin) and
// how often the two pick the same class.
//   node bench/ort_agreement.js PREFIX model.onnx DIR THREADS [OPT]
// OPT is ORT's graph optimisation level: all (default, what a deployment
// runs: QDQ fused into int8 kernels where ORT can) or disabled (Q/DQ
// computed in float as written).
'use strict';
const fs = require('fs');
const path = require('path');

function int32s(file) {
  const b = fs.readFileSync(file);
  return new Int32Array(b.buffer, b.byteOffset, b.length / 4);
}

async function main() {
  const [prefix, model, dir, threads, opt] = process.argv.slice(2);
  if (!threads) {
    console.error('usage: ort_agreement.js PREFIX model.onnx DIR THREADS ' +
                  '[all|disabled]');
    process.exit(2);
  }
  const ort = require(
      path.join(path.resolve(prefix), 'node_modules', 'onnxruntime-node'));
  const [n, c, h, w] =
      fs.readFileSync(path.join(dir, 'shape.txt'), 'utf8').trim()
          .split(/\s+/).map(Number);
  const labels = int32s(path.join(dir, 'labels.bin'));
  const classic = int32s(path.join(dir, 'classic.bin'));
  const xb = fs.readFileSync(path.join(dir, 'x.bin'));
  const per = c * h * w;
  if (xb.length !== 4 * n * per || labels.length !== n ||
      classic.length !== n) {
    throw new Error(`${dir}: sizes do not match shape.txt (${n} images)`);
  }
  const x = new Float32Array(xb.buffer, xb.byteOffset, n * per);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    graphOptimizationLevel: opt || 'all',
  });
  let right = 0, classicRight = 0, agree = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i += 64) {
    const b = Math.min(64, n - i);
    const data = x.slice(i * per, (i + b) * per);
    const out = await session.run(
        {input: new ort.Tensor('float32', data, [b, c, h, w])});
    const z = out.logits.data, k = out.logits.dims[1];
    for (let j = 0; j < b; j++) {
      let best = 0;
      for (let q = 1; q < k; q++) {
        if (z[j * k + q] > z[j * k + best]) best = q;
      }
      right += best === labels[i + j];
      agree += best === classic[i + j];
    }
  }
  for (let j = 0; j < n; j++) classicRight += classic[j] === labels[j];
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const pct = (v) => (100 * v / n).toFixed(2);
  console.log(`ort (${opt || 'all'}): ${n} images, top-1 ${pct(right)}% ` +
              `in ${s.toFixed(1)} s`);
  console.log(`classic: top-1 ${pct(classicRight)}%`);
  console.log(`agreement: ${agree}/${n} = ${pct(agree)}% ` +
              `(${n - agree} differ)`);
}

main().catch((e) => {
  console.error(`ort_agreement.js: ${e.message}`);
  process.exit(1);
});
