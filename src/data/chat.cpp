// Chat templates rendered natively; see chat.h. Each render_* mirrors its family's Jinja template
// line by line: the comments quote what the template does.
#include "data/chat.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/utf8.h"

namespace llamatrain::data {

namespace {

constexpr std::string_view kSupported =
    "llama2 (Llama 2 chat: [INST] ... [/INST] with <<SYS>>), llama3 (Llama 3: <|start_header_id|> ... "
    "<|eot_id|>), chatml (<|im_start|> ... <|im_end|> as Qwen2.5, with its default system turn and tools), "
    "chatml_plain (the same without a default system turn or tools), qwen3 (Qwen3's ChatML with <think> reasoning "
    "blocks and tools)";

// Length of the whitespace code point at s[i] (0 when none): the characters that both Python's
// str.strip() (Jinja's trim and .strip() in transformers) and JavaScript's trim() remove.
size_t space_at(std::string_view s, size_t i) {
  size_t bad = 0;
  const size_t n = utf8_sequence(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i, &bad);
  if (n == 0) return 0;
  const uint32_t cp = utf8_decode_at(s, i);
  return unicode_white_space(cp) && cp != 0x85 ? n : 0;  // Python strips U+0085, JavaScript does not
}

// The start of the whitespace code point that ends s[0, end) (end when none).
size_t space_before(std::string_view s, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end; len++)
    if (space_at(s, end - len) == len) return end - len;
  return end;
}

std::string strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && space_at(s, b)) b += space_at(s, b);
  while (e > b && space_before(s, e) < e) e = space_before(s, e);
  return std::string(s.substr(b, e - b));
}

void text(std::vector<ChatSegment>* out, std::string s, bool in_loss = false) {
  if (!s.empty()) out->push_back({std::move(s), false, in_loss});
}
void special(std::vector<ChatSegment>* out, std::string_view s, bool in_loss = false) {
  out->push_back({std::string(s), true, in_loss});
}

bool bad(std::string* why, std::string reason) {
  *why = std::move(reason);
  return false;
}

// Meta's Llama-2-chat template: an optional first system message is folded into the first user
// turn as "<<SYS>>\n{system}\n<</SYS>>\n\n{user}"; user and assistant must alternate from a user;
// user turns are "<s>[INST] " + content.strip() + " [/INST]", assistant turns
// " " + content.strip() + " </s>". Nothing is added for a generation prompt.
bool render_llama2(const std::vector<ChatMessage>& m, std::vector<ChatSegment>* out, std::string* why) {
  const bool has_system = !m.empty() && m[0].role == "system";
  const size_t first = has_system ? 1 : 0;
  for (size_t i = first; i < m.size(); i++) {
    const size_t k = i - first;  // loop.index0
    const char* expected = k % 2 == 0 ? "user" : "assistant";
    if (m[i].role != expected)
      return bad(why, fmt::format("message {} is {}, expected {}: the Llama 2 chat template takes user and assistant "
                                  "turns in alternation after an optional first system message",
                                  i + 1, m[i].role, expected));
    const std::string content =
        k == 0 && has_system ? fmt::format("<<SYS>>\n{}\n<</SYS>>\n\n{}", m[0].content, m[i].content) : m[i].content;
    if (m[i].role == "user") {
      special(out, "<s>");
      text(out, fmt::format("[INST] {} [/INST]", strip(content)));
    } else {
      text(out, fmt::format(" {} ", strip(content)), true);
      special(out, "</s>", true);
    }
  }
  return true;
}

// Llama 3: "<|begin_of_text|>" once, then per message
// "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + (content | trim) + "<|eot_id|>".
bool render_llama3(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen, std::vector<ChatSegment>* out) {
  for (size_t i = 0; i < m.size(); i++) {
    const bool a = m[i].role == "assistant";
    if (i == 0) special(out, "<|begin_of_text|>");
    special(out, "<|start_header_id|>");
    text(out, m[i].role);
    special(out, "<|end_header_id|>");
    text(out, "\n\n");
    text(out, strip(m[i].content), a);
    special(out, "<|eot_id|>", a);
  }
  if (gen || t.generation_prompt_always) {
    special(out, "<|start_header_id|>");
    text(out, "assistant");
    special(out, "<|end_header_id|>");
    text(out, "\n\n");
  }
  return true;
}

void chatml_turn(std::vector<ChatSegment>* out, const std::string& role, const std::string& content, bool in_loss) {
  special(out, "<|im_start|>");
  text(out, role + "\n");
  text(out, content, in_loss);
  special(out, "<|im_end|>", in_loss);
  text(out, "\n");
}

// The system turn that declares tools, as Qwen2.5's and Qwen3's templates write it: `head` (the system
// text and what separates it), then each tool's JSON on a line inside <tools>, then how to call them.
void tools_system_turn(std::vector<ChatSegment>* out, const std::string& head, const std::vector<std::string>& tools) {
  special(out, "<|im_start|>");
  std::string s = "system\n" + head +
                  "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
                  "with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const std::string& tool : tools) s += "\n" + tool;
  s += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
       "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
       "<args-json-object>}\n</tool_call>";
  text(out, s);
  special(out, "<|im_end|>");
  text(out, "\n");
}

// A tool call as both Qwen templates write it; `arguments` as the template puts them.
std::string tool_call_text(const ToolCall& c, const std::string& arguments) {
  return "<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + arguments + "}\n</tool_call>";
}

// Tool results: a run of consecutive tool messages is one user turn, each result inside
// <tool_response> on its own lines (both Qwen templates).
void tool_result(std::vector<ChatSegment>* out, const std::vector<ChatMessage>& m, size_t i) {
  if (i == 0 || m[i - 1].role != "tool") {
    special(out, "<|im_start|>");
    text(out, "user");
  }
  text(out, "\n<tool_response>\n" + m[i].content + "\n</tool_response>");
  if (i + 1 == m.size() || m[i + 1].role != "tool") {
    special(out, "<|im_end|>");
    text(out, "\n");
  }
}

// ChatML as Qwen2.5 writes it: a system turn first (the conversation's first message when it is a
// system one, else the default system prompt; with tools, that text and the tools' declaration), then
// every other message as "<|im_start|>" + role + "\n" + content + "<|im_end|>" + "\n"; content as is.
// An assistant turn with tool calls: the content after a line break when there is any, then each call
// on its lines, the arguments as tojson writes them; tool results as tool_result.
bool render_chatml(const ChatTemplate& t, const ChatRow& row, bool gen, std::vector<ChatSegment>* out) {
  const std::vector<ChatMessage>& m = row.messages;
  const bool has_system = !m.empty() && m[0].role == "system";
  if (!row.tools.empty())
    tools_system_turn(out, (has_system ? m[0].content : t.default_system) + "\n\n", row.tools);
  else if (has_system)
    chatml_turn(out, "system", m[0].content, false);
  else if (!t.default_system.empty())
    chatml_turn(out, "system", t.default_system, false);
  for (size_t i = has_system ? 1 : 0; i < m.size(); i++) {
    if (t.tools && m[i].role == "tool") {
      tool_result(out, m, i);
    } else if (m[i].role == "assistant" && !m[i].tool_calls.empty()) {
      // The template writes "\n" + content when there is content, then "\n" + each call: the first line
      // break is the header's either way.
      special(out, "<|im_start|>");
      text(out, "assistant\n");
      text(out, m[i].content, true);
      for (size_t k = 0; k < m[i].tool_calls.size(); k++) {
        const ToolCall& c = m[i].tool_calls[k];
        text(out, fmt::format("{}{}", k == 0 && m[i].content.empty() ? "" : "\n", tool_call_text(c, c.arguments_json)),
             true);
      }
      special(out, "<|im_end|>", true);
      text(out, "\n");
    } else {
      chatml_turn(out, m[i].role, m[i].content, m[i].role == "assistant");
    }
  }
  if (gen) {
    special(out, "<|im_start|>");
    text(out, "assistant\n");
  }
  return true;
}

// Python's str.lstrip/rstrip/strip of '\n' only, as Qwen3's template applies them.
std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Qwen3: ChatML without a default system turn, tools as Qwen2.5 declares them (after the system text
// and a blank line, when there is one). Reasoning: an assistant turn's reasoning_content, else the text
// before its first </think> (after the last <think> before that, line breaks trimmed), with the content
// the text after its last </think>. Assistant turns after the last user query (a user message that is not a tool
// response) render "<think>\n" + reasoning + "\n</think>\n\n" + content when they are the last message
// or have reasoning; every other turn renders its content only: reasoning before the last query is
// dropped, as the template does to training data. Tool calls: the arguments' text when they were a
// string, else tojson; a line break before each but a first one with no content before it.
bool render_qwen3(const ChatTemplate& t, const ChatRow& row, bool gen, std::vector<ChatSegment>* out) {
  const std::vector<ChatMessage>& m = row.messages;
  const bool has_system = !m.empty() && m[0].role == "system";
  if (!row.tools.empty())
    tools_system_turn(out, has_system ? m[0].content + "\n\n" : "", row.tools);
  else if (has_system)
    chatml_turn(out, "system", m[0].content, false);
  size_t last_query = m.empty() ? 0 : m.size() - 1;
  for (size_t k = m.size(); k-- > 0;)
    if (m[k].role == "user" &&
        !(m[k].content.starts_with("<tool_response>") && m[k].content.ends_with("</tool_response>"))) {
      last_query = k;
      break;
    }
  for (size_t i = 0; i < m.size(); i++) {
    const ChatMessage& x = m[i];
    if (x.role == "user" || (x.role == "system" && i > 0)) {
      chatml_turn(out, x.role, x.content, false);
    } else if (x.role == "assistant") {
      std::string content = x.content, reasoning = x.reasoning;
      if (!x.has_reasoning) {
        if (const size_t close = content.find("</think>"); close != std::string::npos) {
          const std::string_view before = rstrip_newlines(std::string_view(content).substr(0, close));
          const size_t open = before.rfind("<think>");
          reasoning = std::string(lstrip_newlines(open == std::string_view::npos ? before : before.substr(open + 7)));
          content = std::string(lstrip_newlines(std::string_view(content).substr(content.rfind("</think>") + 8)));
        }
      }
      special(out, "<|im_start|>");
      text(out, "assistant\n");
      if (i > last_query && (i + 1 == m.size() || !reasoning.empty())) {
        text(out, fmt::format("<think>\n{}\n</think>\n\n", lstrip_newlines(rstrip_newlines(reasoning))), true);
        text(out, std::string(lstrip_newlines(content)), true);
      } else {
        text(out, content, true);
      }
      for (size_t c = 0; c < x.tool_calls.size(); c++) {
        const ToolCall& call = x.tool_calls[c];
        const bool newline = c > 0 || !content.empty();  // the template tests content before its lstrip
        text(out,
             fmt::format("{}{}", newline ? "\n" : "",
                         tool_call_text(call, call.arguments_is_text ? call.arguments_text : call.arguments_json)),
             true);
      }
      special(out, "<|im_end|>", true);
      text(out, "\n");
    } else if (x.role == "tool") {
      tool_result(out, m, i);
    }
  }
  if (gen) {
    special(out, "<|im_start|>");
    text(out, "assistant\n");
    if (!t.enable_thinking) text(out, "<think>\n\n</think>\n\n");
  }
  return true;
}

// The default system prompt of a ChatML template: the text of a literal
// '<|im_start|>system\n...<|im_end|>' without quotes, backslashes or Jinja in it; empty when the
// template has none. The \n is backslash-n in Jinja source, or a real line break where the JSON
// of tokenizer_config.json held the template with its escapes resolved (as transformers reads some).
std::string chatml_default_system(const std::string& jinja) {
  const std::string close = "<|im_end|>";
  for (const std::string open : {"<|im_start|>system\\n", "<|im_start|>system\n"})
    for (size_t at = jinja.find(open); at != std::string::npos; at = jinja.find(open, at + 1)) {
      const size_t b = at + open.size(), e = jinja.find(close, b);
      if (e == std::string::npos) break;
      const std::string s = jinja.substr(b, e - b);
      if (!s.empty() && s.find_first_of("'\"\\{}+\n") == std::string::npos) return s;
    }
  return "";
}

}  // namespace

std::string_view chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::llama2: return "llama2";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::qwen3: return "qwen3";
  }
  return "?";
}

ChatTemplate builtin_chat_template(std::string_view name) {
  ChatTemplate t;
  if (name == "llama2")
    t.format = ChatFormat::llama2;
  else if (name == "llama3")
    t.format = ChatFormat::llama3;
  else if (name == "chatml") {
    t.format = ChatFormat::chatml;
    t.default_system = std::string(kQwenDefaultSystem);
    t.tools = true;
  } else if (name == "chatml_plain") {
    t.format = ChatFormat::chatml;
  } else if (name == "qwen3") {
    t.format = ChatFormat::qwen3;
    t.tools = true;
  } else {
    fail("chat template \"{}\": unknown, expected auto, llama2, llama3, chatml, chatml_plain or qwen3\nhint: the "
         "built-in ones are {}",
         name, kSupported);
  }
  t.source = fmt::format("built-in {}", name);
  return t;
}

ChatTemplate recognise_chat_template(const std::string& jinja, const std::string& where) {
  auto has = [&](std::string_view s) { return jinja.find(s) != std::string::npos; };
  const std::string hint =
      fmt::format("hint: set model.data.chat_template to llama2, llama3, chatml, chatml_plain or qwen3 to render with "
                  "one of the built-in templates ({}) instead of this one",
                  kSupported);
  auto unsupported = [&](std::string_view what) {
    fail("chat template of {}: {}, which is not rendered here\n{}", where, what, hint);
  };
  // Qwen3's reasoning rule, word for word: the last answer's <think> block is always rendered.
  const bool qwen3 = has("<|im_start|>") && has("<think>") && has("last_query_index") &&
                     has("loop.last or (not loop.last and reasoning_content)");
  if (!qwen3 && (has("<think>") || has("reasoning_content")))
    unsupported("it renders reasoning (<think>) blocks by rules other than Qwen3's (qwen3 renders Qwen3's)");
  if (has("Cutting Knowledge Date"))
    unsupported("it adds a dated system header (\"Cutting Knowledge Date\", Llama 3.1 and later)");
  ChatTemplate t;
  if (qwen3) {
    t.format = ChatFormat::qwen3;
    t.tools = true;
  } else if (has("[INST]") && has("<<SYS>>")) {
    t.format = ChatFormat::llama2;
  } else if (has("<|start_header_id|>") && has("<|end_header_id|>") && has("<|eot_id|>")) {
    t.format = ChatFormat::llama3;
    t.generation_prompt_always = !has("add_generation_prompt");
  } else if (has("<|im_start|>") && has("<|im_end|>")) {
    t.format = ChatFormat::chatml;
    t.default_system = chatml_default_system(jinja);
    // Qwen2.5's tool rendering (its tools follow the default system prompt, so one is needed).
    t.tools = has("<tool_call>") && has("<tool_response>") && !t.default_system.empty();
  } else {
    const std::string head = jinja.substr(0, 80);
    fail("chat template of {}: none of the supported families, got one that starts {}\n{}", where,
         nlohmann::json(head).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), hint);
  }
  t.source = fmt::format("{} (recognised as {})", where, chat_format_name(t.format));
  return t;
}

std::string find_tokenizer_config(const std::string& tokenizer_path, const std::string& fallback_dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> dirs;
  if (!tokenizer_path.empty())
    dirs.push_back(is_directory(tokenizer_path) ? fs::path(tokenizer_path) : fs::path(tokenizer_path).parent_path());
  if (!fallback_dir.empty()) dirs.push_back(fallback_dir);
  for (const fs::path& dir : dirs)
    if (is_regular_file((dir / "tokenizer_config.json").string())) return (dir / "tokenizer_config.json").string();
  return "";
}

ChatTemplate load_chat_template(std::string_view choice, const std::string& tokenizer_config) {
  if (choice != "auto") return builtin_chat_template(choice);
  const std::string hint = "hint: set model.data.chat_template to llama2, llama3, chatml, chatml_plain or qwen3";
  if (tokenizer_config.empty() || !is_regular_file(tokenizer_config))
    fail("model.data.chat_template auto: no tokenizer_config.json{} to take the chat template from\n{}",
         tokenizer_config.empty() ? "" : " at " + tokenizer_config, hint);
  auto j = nlohmann::json::parse(read_small_file(tokenizer_config, size_t(64) << 20, "tokenizer_config.json"), nullptr,
                                 /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not a JSON object\n{}", tokenizer_config, hint);
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null())
    fail("{} has no chat_template (a base model's tokenizer), so model.data.chat_template auto has none to use\n{}",
         tokenizer_config, hint);
  std::string jinja;
  if (it->is_string()) {
    jinja = it->get<std::string>();
  } else if (it->is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    for (const auto& e : *it)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        jinja = e["template"].get<std::string>();
  }
  if (jinja.empty())
    fail("{}: chat_template is neither a string nor a list with a \"default\" one\n{}", tokenizer_config, hint);
  return recognise_chat_template(jinja, tokenizer_config);
}

namespace {

using ojson = nlohmann::ordered_json;

void write_tojson(const ojson& v, std::string* out) {
  if (v.is_object()) {
    *out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) *out += ", ";
      first = false;
      *out += ojson(k).dump(-1, ' ', false);
      *out += ": ";
      write_tojson(x, out);
    }
    *out += '}';
  } else if (v.is_array()) {
    *out += '[';
    for (size_t i = 0; i < v.size(); i++) {
      if (i) *out += ", ";
      write_tojson(v[i], out);
    }
    *out += ']';
  } else {
    *out += v.dump(-1, ' ', /*ensure_ascii=*/false);
  }
}

std::string tojson(const ojson& v) {
  std::string s;
  write_tojson(v, &s);
  return s;
}

// A tool call: {"type": "function", "function": {"name", "arguments"}} or {"name", "arguments"}.
bool parse_tool_call(const ojson& j, ToolCall* c, std::string* why) {
  const ojson* f = &j;
  if (j.is_object() && j.contains("function") && j["function"].is_object()) f = &j["function"];
  if (!f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
    return bad(why, "a tool call has no \"name\" string; expected {\"name\": ..., \"arguments\": {...}}");
  if (!f->contains("arguments") || (*f)["arguments"].is_null())
    return bad(why, fmt::format("tool call \"{}\" has no \"arguments\"; give {{}} when it takes none",
                                (*f)["name"].get<std::string>()));
  c->name = (*f)["name"].get<std::string>();
  const ojson& args = (*f)["arguments"];
  c->arguments_json = tojson(args);
  c->arguments_is_text = args.is_string();
  c->arguments_text = c->arguments_is_text ? args.get<std::string>() : c->arguments_json;
  return true;
}

// A list of tool calls, or a JSON text of one call or a list (ShareGPT's function_call value).
bool parse_tool_calls(const ojson& j, std::vector<ToolCall>* calls, std::string* why) {
  ojson v = j;
  if (j.is_string()) {
    v = ojson::parse(j.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded())
      return bad(why, "a function_call value is not JSON; expected {\"name\": ..., \"arguments\": {...}}");
  }
  if (!v.is_array()) v = ojson::array({v});
  for (const auto& x : v) {
    calls->emplace_back();
    if (!parse_tool_call(x, &calls->back(), why)) return false;
  }
  return true;
}

// A row's tools: a list of tool definitions, or a JSON text of one (LLaMA-Factory's ShareGPT files).
bool parse_tools(const ojson& row, std::vector<std::string>* tools, std::string* why) {
  auto it = row.find("tools");
  if (it == row.end() || it->is_null()) return true;
  ojson v = *it;
  if (v.is_string()) {
    if (v.get<std::string>().empty()) return true;
    v = ojson::parse(it->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded())
      return bad(why, "\"tools\" is a string that is not JSON; expected a list of tool definitions");
  }
  if (!v.is_array())
    return bad(why, "\"tools\" is not a list; expected [{\"type\": \"function\", \"function\": {...}}, ...]");
  for (const auto& t : v) {
    if (!t.is_object()) return bad(why, "a tool definition is not an object");
    tools->push_back(tojson(t));
  }
  return true;
}

}  // namespace

std::string chat_tojson(std::string_view json) {
  const ojson v = ojson::parse(json, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) fail("chat_tojson: not JSON: {}", json.substr(0, 80));
  return tojson(v);
}

bool chat_row(std::string_view line, ChatRow* out, std::string* why) {
  auto row = ojson::parse(line, nullptr, /*allow_exceptions=*/false);
  if (row.is_discarded()) return bad(why, "invalid JSON");
  if (!row.is_object()) return bad(why, "not a JSON object");
  out->messages.clear();
  out->tools.clear();
  std::vector<ChatMessage>* messages = &out->messages;
  auto string_field = [&](const char* key, std::string* s) {
    auto f = row.find(key);
    if (f == row.end() || !f->is_string()) return false;
    *s = f->get<std::string>();
    return true;
  };
  if (auto it = row.find("messages"); it != row.end()) {
    if (!it->is_array())
      return bad(why, "\"messages\" is not a list; expected [{\"role\": ..., \"content\": ...}, ...]");
    for (size_t i = 0; i < it->size(); i++) {
      const auto& m = (*it)[i];
      if (!m.is_object()) return bad(why, "a message is not an object; expected {\"role\": ..., \"content\": ...}");
      auto role = m.find("role");
      if (role == m.end() || !role->is_string()) return bad(why, "a message has no \"role\" string");
      ChatMessage msg;
      msg.role = role->get<std::string>();
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
        return bad(why, fmt::format("unknown role \"{}\"; expected system, user, assistant or tool", msg.role));
      if (msg.role == "assistant") {
        if (auto c = m.find("tool_calls"); c != m.end() && !c->is_null()) {
          if (!c->is_array()) return bad(why, "\"tool_calls\" is not a list");
          if (!parse_tool_calls(*c, &msg.tool_calls, why)) return false;
        }
        if (auto r = m.find("reasoning_content"); r != m.end() && !r->is_null()) {
          if (!r->is_string()) return bad(why, "\"reasoning_content\" is not a string");
          msg.has_reasoning = true;
          msg.reasoning = r->get<std::string>();
        }
      }
      auto content = m.find("content");
      const bool may_be_empty = !msg.tool_calls.empty();  // OpenAI writes content null beside tool calls
      if ((content == m.end() || content->is_null()) && !may_be_empty)
        return bad(why, "a message has no \"content\"; give each message its text");
      if (content != m.end() && !content->is_null() && !content->is_string())
        return bad(why, "a message's \"content\" is not a string");
      if (content != m.end() && content->is_string()) msg.content = content->get<std::string>();
      messages->push_back(std::move(msg));
    }
    return parse_tools(row, &out->tools, why);
  }
  std::string instruction, input, output;
  if (row.contains("instruction") || row.contains("output")) {  // Alpaca
    if (!string_field("instruction", &instruction)) return bad(why, "Alpaca row without an \"instruction\" string");
    if (!string_field("output", &output)) return bad(why, "Alpaca row without an \"output\" string");
    if (row.contains("input") && !row["input"].is_null() && !string_field("input", &input))
      return bad(why, "Alpaca \"input\" is not a string");
    messages->emplace_back("user", input.empty() ? instruction : instruction + "\n\n" + input);
    messages->emplace_back("assistant", output);
    return true;
  }
  if (auto it = row.find("conversations"); it != row.end()) {  // ShareGPT: [{"from": ..., "value": ...}, ...]
    if (!it->is_array())
      return bad(why, "\"conversations\" is not a list; expected [{\"from\": ..., \"value\": ...}, ...]");
    for (const auto& m : *it) {
      if (!m.is_object() || !m.contains("from") || !m["from"].is_string())
        return bad(why, "a ShareGPT turn has no \"from\" string; expected {\"from\": \"human\", \"value\": ...}");
      const std::string from = m["from"].get<std::string>();
      const std::string role = from == "human" || from == "user"         ? "user"
                               : from == "gpt" || from == "assistant"    ? "assistant"
                               : from == "system"                        ? "system"
                               : from == "observation" || from == "tool" ? "tool"
                               : from == "function_call"                 ? "assistant"
                                                                         : "";
      if (role.empty())
        return bad(why, fmt::format("ShareGPT turn from \"{}\"; expected human, gpt, system, function_call or "
                                    "observation",
                                    from));
      if (!m.contains("value") || !m["value"].is_string()) return bad(why, "a ShareGPT turn has no \"value\" string");
      if (from == "function_call") {
        ChatMessage call("assistant", "");
        if (!parse_tool_calls(m["value"], &call.tool_calls, why)) return false;
        messages->push_back(std::move(call));
      } else {
        messages->emplace_back(role, m["value"].get<std::string>());
      }
    }
    return parse_tools(row, &out->tools, why);
  }
  return bad(why, "neither \"messages\" nor Alpaca's \"instruction\"/\"output\"");
}

bool render_chat(const ChatTemplate& t, const ChatRow& row, bool add_generation_prompt,
                 std::vector<ChatSegment>* segments, std::string* why) {
  segments->clear();
  const std::vector<ChatMessage>& messages = row.messages;
  if (!add_generation_prompt &&
      std::none_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "assistant"; }))
    return bad(why, "conversation without an assistant turn: nothing to train on (add the reply, or drop the row)");
  // What the template would drop is refused, never lost without a word.
  const bool tools = t.format == ChatFormat::qwen3 || (t.format == ChatFormat::chatml && t.tools);
  const std::string name = fmt::format("the {} chat template ({})", chat_format_name(t.format), t.source);
  const std::string use =
      "use a template that renders them (chatml as Qwen2.5's, or qwen3), or leave them out of the rows";
  if (!row.tools.empty() && !tools)
    return bad(why, fmt::format("the row declares tools, which {} does not render: {}", name, use));
  for (size_t i = 0; i < messages.size(); i++) {
    const ChatMessage& m = messages[i];
    if (!m.tool_calls.empty() && !tools)
      return bad(why, fmt::format("message {} makes tool calls, which {} does not render: {}", i + 1, name, use));
    if (m.has_reasoning && t.format != ChatFormat::qwen3)
      return bad(why, fmt::format("message {} has reasoning_content, which {} does not render: use the qwen3 template, "
                                  "or put the reasoning in the content",
                                  i + 1, name));
    if (m.role == "tool" && t.format == ChatFormat::llama2)
      return bad(why, fmt::format("message {} is a tool result, which {} does not render: {}", i + 1, name, use));
  }
  switch (t.format) {
    case ChatFormat::llama2: return render_llama2(messages, segments, why);
    case ChatFormat::llama3: return render_llama3(t, messages, add_generation_prompt, segments);
    case ChatFormat::chatml: return render_chatml(t, row, add_generation_prompt, segments);
    case ChatFormat::qwen3: return render_qwen3(t, row, add_generation_prompt, segments);
  }
  return bad(why, "unknown chat format");
}

bool render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                 std::vector<ChatSegment>* segments, std::string* why) {
  return render_chat(t, ChatRow{messages, {}}, add_generation_prompt, segments, why);
}

std::string chat_text(const std::vector<ChatSegment>& segments) {
  std::string s;
  for (const auto& g : segments) s += g.text;
  return s;
}

std::string chat_end_of_turn(const ChatTemplate& t) {
  switch (t.format) {
    case ChatFormat::llama2: return "</s>";
    case ChatFormat::llama3: return "<|eot_id|>";
    case ChatFormat::chatml:
    case ChatFormat::qwen3: return "<|im_end|>";
  }
  return "";
}

std::vector<std::string> chat_special_tokens(const ChatTemplate& t) {
  switch (t.format) {
    case ChatFormat::llama2: return {"<s>", "</s>"};
    case ChatFormat::llama3: return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatFormat::chatml:
    case ChatFormat::qwen3: return {"<|im_start|>", "<|im_end|>"};
  }
  return {};
}

void check_chat_tokens(const ChatTemplate& t, const Tokenizer& tok) {
  std::vector<std::string> missing;
  for (const std::string& s : chat_special_tokens(t)) {
    const int id = tok.piece_to_id(s);  // the unknown id (or a negative one) when there is no such piece
    if (id < 0 || tok.id_to_piece(id) != s) missing.push_back(s);
  }
  if (!missing.empty())
    fail("chat template {} needs the special token{} {}, which the tokenizer {} does not have\nhint: use the model "
         "family's own tokenizer, or set model.data.chat_template to the family of this one (llama2, llama3, chatml or "
         "qwen3)",
         t.source, missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), tok.path());
}

void encode_chat(const std::vector<ChatSegment>& segments, const Tokenizer& tok, std::vector<int>* ids,
                 std::vector<uint8_t>* in_loss) {
  ids->clear();
  in_loss->clear();
  for (size_t i = 0; i < segments.size();) {
    if (segments[i].special) {
      ids->push_back(tok.piece_to_id(segments[i].text));
      in_loss->push_back(segments[i].in_loss);
      i++;
      continue;
    }
    // A run [i, j) of text segments: encoded whole; segment k owns the ids from where the run's
    // prefix before it ends to where the prefix through it ends (the common length of that
    // prefix's ids and the run's ids: a token that spans a boundary goes to the later segment).
    size_t j = i;
    std::string run;
    while (j < segments.size() && !segments[j].special) run += segments[j++].text;
    const std::vector<int> whole = tok.encode(run);
    size_t from = 0;
    std::string prefix;
    for (size_t k = i; k < j; k++) {
      size_t to = whole.size();
      if (k + 1 < j) {
        prefix += segments[k].text;
        const std::vector<int> p = tok.encode(prefix);
        to = size_t(std::mismatch(p.begin(), p.end(), whole.begin(), whole.end()).first - p.begin());
        to = std::max(to, from);
      }
      for (size_t x = from; x < to; x++) {
        ids->push_back(whole[x]);
        in_loss->push_back(segments[k].in_loss);
      }
      from = to;
    }
    i = j;
  }
}

}  // namespace llamatrain::data
