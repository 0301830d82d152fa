// Reference token ids from @lenml/tokenizers (a port of the Hugging Face tokenizers
// used by transformers.js), for the differential tokenizer tests.
// usage: node tokenizer_reference.mjs TOKENIZER_DIR DOCS.json OUT.json
// DOCS.json: a JSON list of strings. OUT.json: {"ids": [[...], ...]} (no special
// tokens added; special tokens written in the text are matched, as HF does).
import fs from "fs";
import path from "path";
import { TokenizerLoader } from "@lenml/tokenizers";

const [dir, docsPath, outPath] = process.argv.slice(2);
const read = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: read("tokenizer.json"),
  tokenizerConfig: read("tokenizer_config.json"),
});
const docs = JSON.parse(fs.readFileSync(docsPath, "utf8"));
const ids = docs.map((d) => Array.from(tokenizer.encode(d, { add_special_tokens: false })));
fs.writeFileSync(outPath, JSON.stringify({ ids }));
