// Reference encodings of a corpus with Hugging Face's JavaScript tokenizers (@huggingface/tokenizers)
// and, for byte-level files whose merges are ranked like tiktoken's (Llama 3: ignore_merges), with
// tiktoken built from the file's vocabulary and pre-tokenizer regex.
//   NODE_PATH=$(bash install.sh)/node_modules node tokenizer_reference.mjs CORPUS.json OUT.json NAME=DIR...
// CORPUS.json: {"docs": [{"text": s} | {"hex": bytes}, optional "repeat": n]}; hex input (invalid
// UTF-8) reaches the tokenizer as a byte decoder gives it to JavaScript, with U+FFFD replacements.
// OUT.json: {NAME: {"docs": [{"ids", "tiktoken" (or null), "decoded_hex", "round_trip"}]}}; decoding
// is tokenizer.json's own (clean_up_tokenization_spaces off) with special tokens kept.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH.split(":")[0], "noop.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const { Tiktoken } = require("tiktoken/lite");

const [corpusPath, outPath, ...models] = process.argv.slice(2);
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const texts = corpus.docs.map((d) => {
  const one = d.hex !== undefined ? decoder.decode(Buffer.from(d.hex, "hex")) : d.text;
  return one.repeat(d.repeat ?? 1);
});

// GPT-2's byte-to-unicode table, to turn byte-level tokens back into bytes for tiktoken's ranks.
function unicodeToBytes() {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  return new Map(cs.map((c, i) => [String.fromCodePoint(c), bs[i]]));
}

function tiktokenFor(json) {
  const pre = json.pre_tokenizer;
  const steps = pre?.type === "Sequence" ? pre.pretokenizers : [pre];
  const split = steps.find((s) => s?.type === "Split" && s.pattern?.Regex);
  const byteLevel = steps.find((s) => s?.type === "ByteLevel");
  if (!split || !byteLevel || byteLevel.use_regex || !json.model.ignore_merges || json.normalizer) return null;
  const table = unicodeToBytes();
  const lines = [];
  for (const [tok, id] of Object.entries(json.model.vocab)) {
    const bytes = Buffer.from([...tok].map((c) => table.get(c)));
    lines[id] = `${bytes.toString("base64")} ${id}`;
  }
  const specials = Object.fromEntries(json.added_tokens.map((a) => [a.content, a.id]));
  return new Tiktoken(lines.filter((l) => l).join("\n") + "\n", specials, split.pattern.Regex);
}

const out = {};
for (const spec of models) {
  const [name, dir] = spec.split("=");
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfgPath = path.join(dir, "tokenizer_config.json");
  const config = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  const tok = new Tokenizer(json, config);
  const tt = tiktokenFor(json);
  out[name] = {
    docs: texts.map((text) => {
      const ids = tok.encode(text, { add_special_tokens: false }).ids;
      const decoded = ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "";
      return {
        ids,
        tiktoken: tt ? Array.from(tt.encode(text, "all")) : null,
        decoded_hex: Buffer.from(decoded, "utf8").toString("hex"),
        round_trip: decoded === text,
      };
    }),
  };
  tt?.free();
}
fs.writeFileSync(outPath, JSON.stringify(out));
