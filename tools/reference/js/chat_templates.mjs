// Renders conversations with the chat_template of tokenizer_config.json files through Hugging Face's
// own Jinja implementation (@huggingface/jinja), as the reference of the chat-template tests.
//   NODE_PATH=<install.sh folder>/node_modules node chat_templates.mjs CASES.json > renders.json
// CASES.json: {"configs": {name: tokenizer_config.json path}, "conversations": [[{role, content}...] |
// {"messages": [...], "tools": [...]}, ...]} (messages as chat rows hold them: tool_calls, reasoning_content)
// Output: {name: [{"plain": text, "generation": text} | {"error": message}, ...]} in conversation
// order, "generation" rendered with add_generation_prompt.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { Template } = require("@huggingface/jinja");

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = {};
for (const [name, path] of Object.entries(cases.configs)) {
  const cfg = JSON.parse(readFileSync(path, "utf8"));
  const token = (t) => (t && typeof t === "object" ? t.content : t) ?? "";
  const template = new Template(cfg.chat_template);
  out[name] = cases.conversations.map((conversation) => {
    const { messages, tools } = Array.isArray(conversation) ? { messages: conversation } : conversation;
    const render = (add_generation_prompt) =>
      template.render({
        messages,
        ...(tools ? { tools } : {}),
        bos_token: token(cfg.bos_token),
        eos_token: token(cfg.eos_token),
        add_generation_prompt,
      });
    try {
      return { plain: render(false), generation: render(true) };
    } catch (e) {
      return { error: String(e.message ?? e) };
    }
  });
}
process.stdout.write(JSON.stringify(out));
