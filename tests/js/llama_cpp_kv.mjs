// The KV cache llama.cpp allocates for a context (node-llama-cpp's prebuilt CPU
// binary): its own log line "llama_kv_cache: size = ... K (f16): ... MiB, V
// (f16): ... MiB", for the sizes of a cache it actually allocated.
// usage: node llama_cpp_kv.mjs MODEL.gguf CONTEXT OUT.json
// OUT.json: {"k_mib": K cache, "v_mib": V cache, "line": the log line, "context": n}.
import fs from "fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, contextArg, outPath] = process.argv.slice(2);
const contextSize = Number(contextArg);
const lines = [];
const llama = await getLlama({
  gpu: false, build: "never", logLevel: LlamaLogLevel.info,
  logger: (level, message) => { lines.push(String(message)); },
});
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({
  contextSize, batchSize: 512, sequences: 1, flashAttention: false,
  experimentalKvCacheKeyType: "F16", experimentalKvCacheValueType: "F16",
});
// The binary's log reaches the logger asynchronously: wait for the line (10 s at most).
const find = () => lines.find((l) => /llama_kv_cache.*size\s*=.*K \(/.test(l));
for (let waited = 0; !find() && waited < 10000; waited += 50) {
  await new Promise((resolve) => setTimeout(resolve, 50));
}
const line = find() ?? "";
const mib = (re) => { const m = line.match(re); return m ? Number(m[1]) : null; };
fs.writeFileSync(outPath, JSON.stringify({
  context: context.contextSize, line: line.trim(),
  k_mib: mib(/K \([^)]*\):\s*([0-9.]+) MiB/), v_mib: mib(/V \([^)]*\):\s*([0-9.]+) MiB/),
}));
await context.dispose();
await model.dispose();
