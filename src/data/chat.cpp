// Chat templates rendered natively; see chat.h. Each render_* mirrors its family's Jinja template
// line by line: the comments quote what the template does.
#include "data/chat.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::data {

namespace {

constexpr std::string_view kSupported =
    "llama2 (Llama 2 chat: [INST] ... [/INST] with <<SYS>>), llama3 (Llama 3: <|start_header_id|> ... "
    "<|eot_id|>), chatml (<|im_start|> ... <|im_end|> as Qwen2.5, with its default system turn), chatml_plain "
    "(the same without a default system turn)";

// Length of the whitespace code point at s[i] (0 when none): the characters that both Python's
// str.strip() (Jinja's trim and .strip() in transformers) and JavaScript's trim() remove.
size_t space_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= '\t' && c <= '\r')) return 1;
  auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  if (c == 0xC2 && at(1) == 0xA0) return 2;                                   // U+00A0
  if (c == 0xE1 && at(1) == 0x9A && at(2) == 0x80) return 3;                  // U+1680
  if (c == 0xE2 && at(1) == 0x80 && (at(2) <= 0x8A || at(2) == 0xA8 || at(2) == 0xA9 || at(2) == 0xAF))
    return at(2) >= 0x80 ? 3 : 0;                                             // U+2000-200A, 2028, 2029, 202F
  if (c == 0xE2 && at(1) == 0x81 && at(2) == 0x9F) return 3;                  // U+205F
  if (c == 0xE3 && at(1) == 0x80 && at(2) == 0x80) return 3;                  // U+3000
  return 0;
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

// ChatML as Qwen2.5 writes it: a system turn first (the conversation's first message when it is a
// system one, else the default system prompt), then every other message as
// "<|im_start|>" + role + "\n" + content + "<|im_end|>" + "\n"; content as is.
bool render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen, std::vector<ChatSegment>* out) {
  const bool has_system = !m.empty() && m[0].role == "system";
  auto turn = [out](const std::string& role, const std::string& content, bool a) {
    special(out, "<|im_start|>");
    text(out, role + "\n");
    text(out, content, a);
    special(out, "<|im_end|>", a);
    text(out, "\n");
  };
  if (has_system) turn("system", m[0].content, false);
  else if (!t.default_system.empty()) turn("system", t.default_system, false);
  for (size_t i = has_system ? 1 : 0; i < m.size(); i++) turn(m[i].role, m[i].content, m[i].role == "assistant");
  if (gen) {
    special(out, "<|im_start|>");
    text(out, "assistant\n");
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
  }
  return "?";
}

ChatTemplate builtin_chat_template(std::string_view name) {
  ChatTemplate t;
  if (name == "llama2") t.format = ChatFormat::llama2;
  else if (name == "llama3") t.format = ChatFormat::llama3;
  else if (name == "chatml") {
    t.format = ChatFormat::chatml;
    t.default_system = std::string(kQwenDefaultSystem);
  } else if (name == "chatml_plain") {
    t.format = ChatFormat::chatml;
  } else {
    fail("chat template \"{}\": unknown, expected auto, llama2, llama3, chatml or chatml_plain\nhint: the built-in "
         "ones are {}", name, kSupported);
  }
  t.source = fmt::format("built-in {}", name);
  return t;
}

ChatTemplate recognise_chat_template(const std::string& jinja, const std::string& where) {
  auto has = [&](std::string_view s) { return jinja.find(s) != std::string::npos; };
  const std::string hint =
      fmt::format("hint: set model.data.chat_template to llama2, llama3, chatml or chatml_plain to render with one of "
                  "the built-in templates ({}) instead of this one",
                  kSupported);
  auto unsupported = [&](std::string_view what) {
    fail("chat template of {}: {}, which is not rendered here\n{}", where, what, hint);
  };
  if (has("<think>") || has("reasoning_content"))
    unsupported("it renders reasoning (<think>) blocks (for Qwen3's conversations without them, chatml_plain renders "
                "its turns)");
  if (has("Cutting Knowledge Date")) unsupported("it adds a dated system header (\"Cutting Knowledge Date\", Llama 3.1 and later)");
  ChatTemplate t;
  if (has("[INST]") && has("<<SYS>>")) {
    t.format = ChatFormat::llama2;
  } else if (has("<|start_header_id|>") && has("<|end_header_id|>") && has("<|eot_id|>")) {
    t.format = ChatFormat::llama3;
    t.generation_prompt_always = !has("add_generation_prompt");
  } else if (has("<|im_start|>") && has("<|im_end|>")) {
    t.format = ChatFormat::chatml;
    t.default_system = chatml_default_system(jinja);
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
  const std::string hint = "hint: set model.data.chat_template to llama2, llama3, chatml or chatml_plain";
  if (tokenizer_config.empty() || !is_regular_file(tokenizer_config))
    fail("model.data.chat_template auto: no tokenizer_config.json{} to take the chat template from\n{}",
         tokenizer_config.empty() ? "" : " at " + tokenizer_config, hint);
  auto j = nlohmann::json::parse(read_small_file(tokenizer_config, size_t(64) << 20, "tokenizer_config.json"), nullptr, /*allow_exceptions=*/false);
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
  if (jinja.empty()) fail("{}: chat_template is neither a string nor a list with a \"default\" one\n{}", tokenizer_config, hint);
  return recognise_chat_template(jinja, tokenizer_config);
}

bool chat_row_messages(std::string_view line, std::vector<ChatMessage>* messages, std::string* why) {
  auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (row.is_discarded()) return bad(why, "invalid JSON");
  if (!row.is_object()) return bad(why, "not a JSON object");
  messages->clear();
  auto string_field = [&](const char* key, std::string* out) {
    auto f = row.find(key);
    if (f == row.end() || !f->is_string()) return false;
    *out = f->get<std::string>();
    return true;
  };
  if (auto it = row.find("messages"); it != row.end()) {
    if (!it->is_array()) return bad(why, "\"messages\" is not a list; expected [{\"role\": ..., \"content\": ...}, ...]");
    for (size_t i = 0; i < it->size(); i++) {
      const auto& m = (*it)[i];
      if (!m.is_object()) return bad(why, "a message is not an object; expected {\"role\": ..., \"content\": ...}");
      auto role = m.find("role");
      if (role == m.end() || !role->is_string()) return bad(why, "a message has no \"role\" string");
      const std::string r = role->get<std::string>();
      if (r != "system" && r != "user" && r != "assistant")
        return bad(why, fmt::format("unknown role \"{}\"; expected system, user or assistant", r));
      auto content = m.find("content");
      if (content == m.end() || content->is_null()) return bad(why, "a message has no \"content\"; give each message its text");
      if (!content->is_string()) return bad(why, "a message's \"content\" is not a string");
      messages->push_back({r, content->get<std::string>()});
    }
    return true;
  }
  std::string instruction, input, output;
  if (row.contains("instruction") || row.contains("output")) {  // Alpaca
    if (!string_field("instruction", &instruction)) return bad(why, "Alpaca row without an \"instruction\" string");
    if (!string_field("output", &output)) return bad(why, "Alpaca row without an \"output\" string");
    if (row.contains("input") && !row["input"].is_null() && !string_field("input", &input))
      return bad(why, "Alpaca \"input\" is not a string");
    messages->push_back({"user", input.empty() ? instruction : instruction + "\n\n" + input});
    messages->push_back({"assistant", output});
    return true;
  }
  if (auto it = row.find("conversations"); it != row.end()) {  // ShareGPT: [{"from": ..., "value": ...}, ...]
    if (!it->is_array()) return bad(why, "\"conversations\" is not a list; expected [{\"from\": ..., \"value\": ...}, ...]");
    for (const auto& m : *it) {
      if (!m.is_object() || !m.contains("from") || !m["from"].is_string())
        return bad(why, "a ShareGPT turn has no \"from\" string; expected {\"from\": \"human\", \"value\": ...}");
      const std::string from = m["from"].get<std::string>();
      const std::string role = from == "human" || from == "user"        ? "user"
                               : from == "gpt" || from == "assistant"   ? "assistant"
                               : from == "system"                       ? "system"
                                                                        : "";
      if (role.empty())
        return bad(why, fmt::format("ShareGPT turn from \"{}\"; expected human, gpt or system (tool turns are not "
                                    "rendered: drop them or the row)", from));
      if (!m.contains("value") || !m["value"].is_string()) return bad(why, "a ShareGPT turn has no \"value\" string");
      messages->push_back({role, m["value"].get<std::string>()});
    }
    return true;
  }
  return bad(why, "neither \"messages\" nor Alpaca's \"instruction\"/\"output\"");
}

bool render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                 std::vector<ChatSegment>* segments, std::string* why) {
  segments->clear();
  if (!add_generation_prompt &&
      std::none_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "assistant"; }))
    return bad(why, "conversation without an assistant turn: nothing to train on (add the reply, or drop the row)");
  switch (t.format) {
    case ChatFormat::llama2: return render_llama2(messages, segments, why);
    case ChatFormat::llama3: return render_llama3(t, messages, add_generation_prompt, segments);
    case ChatFormat::chatml: return render_chatml(t, messages, add_generation_prompt, segments);
  }
  return bad(why, "unknown chat format");
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
    case ChatFormat::chatml: return "<|im_end|>";
  }
  return "";
}

std::vector<std::string> chat_special_tokens(const ChatTemplate& t) {
  switch (t.format) {
    case ChatFormat::llama2: return {"<s>", "</s>"};
    case ChatFormat::llama3: return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatFormat::chatml: return {"<|im_start|>", "<|im_end|>"};
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
         "family's own tokenizer, or set model.data.chat_template to the family of this one (llama2, llama3 or chatml)",
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
