// The official `openai` npm client against a running `lrkv serve` (the server must run
// with --max-seqs 1 --max-queue 0, so that a second concurrent request is overload).
// usage: node openai_client_check.mjs BASE_URL API_KEY MODEL OUT.json
// OUT.json: {check: {"ok": bool, "detail": string}} for every check below.
import fs from "fs";
import OpenAI from "openai";

const [baseURL, apiKey, model, outPath] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 3 });
const strict = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const results = {};

async function check(name, fn) {
  try {
    const detail = await fn();
    results[name] = { ok: true, detail: String(detail ?? "") };
  } catch (e) {
    results[name] = { ok: false, detail: String(e?.stack ?? e) };
  }
}
function expect(cond, what) {
  if (!cond) throw new Error(what);
}
async function expectStatus(promise, status) {
  try {
    await promise;
  } catch (e) {
    expect(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    expect(e.status === status, `status ${e.status}, wanted ${status}: ${e.message}`);
    expect(typeof e.error?.message === "string", "no error.message in the body");
    return e.message;
  }
  throw new Error(`succeeded, wanted HTTP ${status}`);
}
async function running() {
  const text = await (await fetch(`${baseURL.replace(/\/v1$/, "")}/metrics`)).text();
  return Number(/^lrkv_running_sequences (\d+)/m.exec(text)[1]);
}
async function idle() {
  for (let i = 0; i < 100 && (await running()) > 0; ++i) await new Promise((r) => setTimeout(r, 50));
  expect((await running()) === 0, "a sequence is still running");
}
const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Say something about caches." },
];

await check("models", async () => {
  const list = await client.models.list();
  expect(list.data.some((m) => m.id === model), `no ${model} in ${JSON.stringify(list.data)}`);
});

let greedyChat = "";
await check("chat", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  const c = r.choices[0];
  expect(c.message.role === "assistant" && typeof c.message.content === "string", "no message");
  expect(["length", "stop"].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  expect(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 8, "completion tokens");
  expect(r.usage.prompt_tokens > 10, "prompt tokens: the template was not applied");
  greedyChat = c.message.content;
  return JSON.stringify(c.message.content);
});

await check("chat_stream", async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      role ??= c.delta.role;
      text += c.delta.content ?? "";
      finish = c.finish_reason ?? finish;
    }
  }
  expect(role === "assistant", `first delta role ${role}`);
  expect(text === greedyChat, `stream ${JSON.stringify(text)} != ${JSON.stringify(greedyChat)}`);
  expect(finish !== null && usage && usage.completion_tokens > 0, "no finish or usage");
});

let greedyText = "";
await check("completions", async () => {
  const r = await client.completions.create({ model, prompt: "The cache", max_tokens: 16,
                                              temperature: 0 });
  greedyText = r.choices[0].text;
  expect(r.usage.completion_tokens === 16 || r.choices[0].finish_reason === "stop", "usage");
  return JSON.stringify(greedyText);
});

await check("completions_stream", async () => {
  const stream = await client.completions.create({ model, prompt: "The cache", max_tokens: 16,
                                                   temperature: 0, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  expect(text === greedyText, `stream ${JSON.stringify(text)} != ${JSON.stringify(greedyText)}`);
});

await check("stop", async () => {
  // Two characters from the middle (none a replacement character for broken UTF-8).
  const chars = [...greedyText];
  let k = 2;
  while (k + 1 < chars.length && (chars[k] === "\uFFFD" || chars[k + 1] === "\uFFFD")) ++k;
  expect(k + 1 < chars.length, `no stop sequence to cut ${JSON.stringify(greedyText)} at`);
  const stop = chars[k] + chars[k + 1];
  const r = await client.completions.create({ model, prompt: "The cache", max_tokens: 16,
                                              temperature: 0, stop: [stop] });
  const want = greedyText.slice(0, greedyText.indexOf(stop));
  expect(r.choices[0].text === want, `${JSON.stringify(r.choices[0].text)} != ${JSON.stringify(want)}`);
  expect(r.choices[0].finish_reason === "stop", `finish_reason ${r.choices[0].finish_reason}`);
  return `stop ${JSON.stringify(stop)}`;
});

await check("seed", async () => {
  const ask = () => client.completions.create({ model, prompt: "The cache", max_tokens: 12,
                                                temperature: 1, top_p: 0.9, seed: 42 });
  const [a, b] = [await ask(), await ask()];
  expect(a.choices[0].text === b.choices[0].text, "one seed gave two samples");
});

await check("abort_mid_stream", async () => {
  await idle();
  const controller = new AbortController();
  const stream = await client.completions.create(
      { model, prompt: "Once", max_tokens: 480, temperature: 0, stream: true },
      { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      if (++chunks === 2) controller.abort();
    }
  } catch (e) {
    expect(e.name === "AbortError" || e instanceof OpenAI.APIUserAbortError, `${e}`);
  }
  await idle();
  return `${chunks} chunks, then freed`;
});

await check("wrong_key", async () => {
  const wrong = new OpenAI({ baseURL, apiKey: apiKey + "x", maxRetries: 0 });
  return expectStatus(wrong.models.list(), 401);
});
await check("unknown_model", async () =>
  expectStatus(strict.completions.create({ model: "no-such-model", prompt: "a" }), 404));
await check("wrong_type", async () =>
  expectStatus(strict.completions.create({ model, prompt: "a", max_tokens: "7" }), 400));
await check("past_context", async () =>
  expectStatus(strict.completions.create({ model, prompt: "a", max_tokens: 100000 }), 400));
await check("bad_json", async () => {
  const r = await fetch(`${baseURL}/chat/completions`, {
    method: "POST", body: "{bad", headers: { authorization: `Bearer ${apiKey}` } });
  expect(r.status === 400, `status ${r.status}`);
  const body = await r.json();
  expect(body.error?.type === "invalid_request_error", JSON.stringify(body));
});

await check("overload", async () => {
  await idle();
  const controller = new AbortController();
  const first = await strict.completions.create(
      { model, prompt: "Once", max_tokens: 480, temperature: 0, stream: true },
      { signal: controller.signal });
  const iterator = first[Symbol.asyncIterator]();
  await iterator.next();  // the first sequence is decoding
  const detail = await expectStatus(
      strict.completions.create({ model, prompt: "Twice", max_tokens: 4 }), 429);
  controller.abort();
  try { while (!(await iterator.next()).done) {} } catch (e) { /* aborted */ }
  await idle();
  return detail;
});

fs.writeFileSync(outPath, JSON.stringify(results, null, 1));
