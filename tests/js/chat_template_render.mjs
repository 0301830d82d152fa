// Renders chat templates with @huggingface/jinja (the renderer of transformers.js and
// node-llama-cpp), the reference for lrkv's own interpreter (model/chat_template.h).
// usage: node chat_template_render.mjs IN.json OUT.json
// IN.json: {"template", "bos_token", "eos_token", "cases": [{"messages",
// "add_generation_prompt"}]}; OUT.json: [{"text"} or {"error"}] per case.
import fs from "fs";
import { Template } from "@huggingface/jinja";

const [inPath, outPath] = process.argv.slice(2);
const input = JSON.parse(fs.readFileSync(inPath, "utf8"));
const template = new Template(input.template);
const out = input.cases.map((c) => {
  try {
    return { text: template.render({
      messages: c.messages, add_generation_prompt: c.add_generation_prompt,
      bos_token: input.bos_token, eos_token: input.eos_token, tools: null }) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
});
fs.writeFileSync(outPath, JSON.stringify(out));
