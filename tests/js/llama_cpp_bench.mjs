// llama.cpp's own speed on a GGUF file (node-llama-cpp's prebuilt CPU binary, its
// default F16 KV cache, greedy sampling inside llama.cpp): a prefill of CONTEXT
// tokens, then TOKENS decode steps timed one by one; the yardstick that
// `lrkv bench generate --against-llama-cpp` prints beside its own engines.
// usage: node llama_cpp_bench.mjs MODEL.gguf CONTEXT TOKENS THREADS VOCAB OUT.json
// OUT.json: {"prefill_seconds": s, "step_ms": [ms, ...], "threads": n}
import fs from "fs";
import { getLlama } from "node-llama-cpp";

const [modelPath, contextArg, tokensArg, threadsArg, vocabArg, outPath] = process.argv.slice(2);
const contextTokens = Number(contextArg), steps = Number(tokensArg);
const threads = Number(threadsArg), vocab = Number(vocabArg);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({
  contextSize: contextTokens + steps + 8, batchSize: 512, sequences: 1, threads,
});
const seq = context.getSequence();
// The token pattern lrkv's bench fills its cache with.
const ids = [];
for (let t = 0; t < contextTokens; t++) ids.push(1 + (t * 7919) % (vocab - 1));
const p0 = performance.now();
await seq.evaluateWithoutGeneratingNewTokens(ids.slice(0, -1));
const prefillSeconds = (performance.now() - p0) / 1000;
// Each token the generator yields is one decode step (the first evaluates the last
// context token).
const stepMs = [];
let s0 = performance.now();
for await (const token of seq.evaluate(ids.slice(-1), { temperature: 0 })) {
  stepMs.push(performance.now() - s0);
  if (stepMs.length >= steps) break;
  s0 = performance.now();
}
fs.writeFileSync(outPath, JSON.stringify({ prefill_seconds: prefillSeconds, step_ms: stepMs, threads }));
await context.dispose();
await model.dispose();
