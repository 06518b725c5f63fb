// tiktoken's encoding rate on one thread (Node, its Rust core as WASM), the yardstick of
// bench/tokenizer_vs_tiktoken.sh: tiktoken built from a byte-level tokenizer.json (Llama 3: the
// vocabulary as ranks, the Split regex, the added tokens as specials), timed on the JSONL corpus's
// texts only. Prints the same key=value line as spm_encode_rate.
//   NODE_PATH=<install.sh folder>/node_modules node tiktoken_encode_rate.mjs tokenizer.json corpus.jsonl
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH.split(":")[0], "noop.js"));
const { Tiktoken } = require("tiktoken/lite");
const [tokPath, corpusPath] = process.argv.slice(2);
const json = JSON.parse(fs.readFileSync(tokPath, "utf8"));
const steps = json.pre_tokenizer.type === "Sequence" ? json.pre_tokenizer.pretokenizers : [json.pre_tokenizer];
const split = steps.find((s) => s.type === "Split");
const bs = [];
for (let b = 33; b <= 126; ++b) bs.push(b);
for (let b = 161; b <= 172; ++b) bs.push(b);
for (let b = 174; b <= 255; ++b) bs.push(b);
const cs = bs.slice();
for (let b = 0, n = 0; b < 256; ++b) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
const table = new Map(cs.map((c, i) => [String.fromCodePoint(c), bs[i]]));
const lines = Object.entries(json.model.vocab).map(([t, id]) => `${Buffer.from([...t].map((c) => table.get(c))).toString("base64")} ${id}`);
const specials = Object.fromEntries(json.added_tokens.map((a) => [a.content, a.id]));
const enc = new Tiktoken(lines.join("\n") + "\n", specials, split.pattern.Regex);
const texts = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l).text);
let bytes = 0, tokens = 0;
for (const t of texts) bytes += Buffer.byteLength(t, "utf8") + 1;
const c0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
for (const t of texts) tokens += enc.encode(t, "all").length;
const s = Number(process.hrtime.bigint() - t0) / 1e9;
const cpu = (process.cpuUsage(c0).user + process.cpuUsage(c0).system) / 1e6;
console.log(`encode_s=${s.toFixed(3)} encode_cpu_s=${cpu.toFixed(3)} docs=${texts.length} tokens=${tokens} ` +
            `text_bytes=${bytes} encode_mb_s=${(bytes / s / 1e6).toFixed(3)} encode_cpu_mb_s=${(bytes / cpu / 1e6).toFixed(3)}`);
enc.free();
