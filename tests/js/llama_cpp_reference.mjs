// Reference log-likelihoods and greedy tokens from llama.cpp itself (node-llama-cpp's
// prebuilt CPU binary), for comparison with lrkv's runtime on the same GGUF file.
// usage: node llama_cpp_reference.mjs MODEL.gguf IDS.json OUT.json [GREEDY_STEPS]
// IDS.json: {"docs": [[id, ...], ...], "prompt": [id, ...]} (each list starts with the
// document start token). OUT.json: {"nll": [sum over each doc's predicted tokens],
// "token_nll": [[per predicted token], ...], "tokens": [count], "greedy": [ids after
// the prompt], "tokenized": [llama.cpp's own ids of each of IDS.json's optional
// "texts", special tokens matched]}.
import fs from "fs";
import { getLlama } from "node-llama-cpp";

const [modelPath, idsPath, outPath, stepsArg] = process.argv.slice(2);
const steps = Number(stepsArg ?? 16);
const input = JSON.parse(fs.readFileSync(idsPath, "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
const longest = Math.max(input.prompt.length + steps, ...input.docs.map((d) => d.length));
// F32 throughout: llama.cpp's defaults (an F16 KV cache, and flash attention, which
// rounds to F16 inside on CPU) put 1e-4 relative into the perplexity of the sharper
// converted models; with them off llama.cpp agrees with a float64 evaluation to 1e-6.
const kvType = process.env.LRKV_KV_TYPE ?? "F32";
const context = await model.createContext({
  contextSize: longest + 8, batchSize: longest + 8, sequences: 1,
  experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType,
  flashAttention: process.env.LRKV_FLASH === "1",
});
const seq = context.getSequence();

const nll = [], tokenNll = [], tokens = [];
for (const doc of input.docs) {
  await seq.clearHistory();
  const items = doc.slice(0, -1).map((t) => [t, { generateNext: { probabilities: true } }]);
  const res = await seq.controlledEvaluate(items);
  const each = [];
  for (let i = 0; i + 1 < doc.length; i++) each.push(-Math.log(res[i].next.probabilities.get(doc[i + 1])));
  nll.push(each.reduce((a, b) => a + b, 0));
  tokenNll.push(each);
  tokens.push(doc.length - 1);
}

const argmax = (probs) => {
  let best = -1, bestP = -1;
  for (const [t, p] of probs) if (p > bestP || (p === bestP && t < best)) { best = t; bestP = p; }
  return best;
};
await seq.clearHistory();
const greedy = [];
let res = await seq.controlledEvaluate(
    input.prompt.map((t, i) => i + 1 === input.prompt.length
        ? [t, { generateNext: { probabilities: true } }] : t));
for (let s = 0; s < steps; s++) {
  const next = argmax(res[res.length - 1].next.probabilities);
  greedy.push(next);
  res = await seq.controlledEvaluate([[next, { generateNext: { probabilities: true } }]]);
}
const tokenized = (input.texts ?? []).map((t) => Array.from(model.tokenize(t, true)));
fs.writeFileSync(outPath, JSON.stringify({ nll, token_nll: tokenNll, tokens, greedy, tokenized }));
await context.dispose();
await model.dispose();
