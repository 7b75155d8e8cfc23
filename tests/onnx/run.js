// Runs an ONNX model with ONNX Runtime (onnxruntime-node) for the interop
// tests: reads raw little-endian float32 input of shape N,C,H,W, writes the
// "logits" output as raw float32.
//   node run.js PREFIX model.onnx input.bin N,C,H,W logits.bin
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [prefix, model, input, shape, output] = process.argv.slice(2);
  if (!output) {
    console.error('usage: run.js PREFIX model.onnx input.bin N,C,H,W out.bin');
    process.exit(2);
  }
  const ort = require(path.join(prefix, 'node_modules', 'onnxruntime-node'));
  const dims = shape.split(',').map(Number);
  const buf = fs.readFileSync(input);
  const n = dims.reduce((a, b) => a * b, 1);
  if (buf.length !== 4 * n) {
    throw new Error(`${input}: ${buf.length} bytes, expected ${4 * n}`);
  }
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = buf.readFloatLE(4 * i);
  const session = await ort.InferenceSession.create(model,
      {intraOpNumThreads: 1, graphOptimizationLevel: 'disabled'});
  if (session.inputNames[0] !== 'input' ||
      session.outputNames[0] !== 'logits') {
    throw new Error(`names ${session.inputNames} -> ${session.outputNames}`);
  }
  const out = await session.run({input: new ort.Tensor('float32', data, dims)});
  const y = out.logits;
  const ob = Buffer.alloc(4 * y.data.length);
  for (let i = 0; i < y.data.length; i++) ob.writeFloatLE(y.data[i], 4 * i);
  fs.writeFileSync(output, ob);
  console.log(`ort: logits ${y.dims.join('x')}`);
}

main().catch((e) => {
  console.error(`run.js: ${e.message}`);
  process.exit(1);
});
