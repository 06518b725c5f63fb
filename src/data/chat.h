// Chat templates for fine-tuning: conversation records ({"messages": [{role, content}, ...]}, or
// ShareGPT's {"conversations": [{from, value}, ...]}) and Alpaca records ({instruction, input,
// output}) -> the text of a model family's chat template as
// segments (text, special token or not, in the loss or not) -> token ids with a per-id loss flag.
// Four families are built in, each written to render exactly what its Hugging Face chat_template
// renders: Llama 2 chat ([INST] / <<SYS>>), Llama 3 (header ids, <|eot_id|>), ChatML as Qwen2.5 has
// it (with its default system prompt, tool definitions, tool calls and tool results; chatml_plain
// without a default system turn or tools) and Qwen3 (ChatML with reasoning blocks: the last answer's
// <think> block rendered, the ones before the last user query stripped, as its template does). A
// tokenizer_config.json chat_template is recognised by distinctive substrings, never executed: there is
// no Jinja engine here. Leaves out: other reasoning templates, dated Llama 3.1+ system headers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace llamatrain::data {

enum class ChatFormat { llama2, llama3, chatml, qwen3 };

struct ChatTemplate {
  ChatFormat format = ChatFormat::llama3;
  // chatml: the system turn rendered when the conversation has none (Qwen2.5's by default); empty:
  // no system turn then.
  std::string default_system;
  // llama3: the template appends the assistant header even without add_generation_prompt (Meta's
  // Llama 3.0 template does).
  bool generation_prompt_always = false;
  // chatml: renders tool definitions, tool calls and tool results as Qwen2.5's template does (qwen3
  // always renders them, as Qwen3's does).
  bool tools = false;
  // qwen3, for generation: false renders the generation prompt as its template does under
  // enable_thinking=False (an empty <think> block after the assistant header: answer without reasoning).
  bool enable_thinking = true;
  std::string source;  // "built-in llama3", "<path> (recognised as chatml)": for messages
};

// A call an assistant turn makes (OpenAI's {"type": "function", "function": {name, arguments}}).
struct ToolCall {
  std::string name;
  std::string arguments_json;      // the arguments as Jinja's tojson writes them (Python json.dumps)
  bool arguments_is_text = false;  // the arguments were a JSON string (OpenAI's form): their text
  std::string arguments_text;
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  std::string role;  // system | user | assistant | tool
  std::string content;
  bool has_reasoning = false;  // assistant: a reasoning_content field (Qwen3 renders it in <think>)
  std::string reasoning;
  std::vector<ToolCall> tool_calls;  // assistant
};

// One training record: its messages and the tools it declares (each as Jinja's tojson writes it).
struct ChatRow {
  std::vector<ChatMessage> messages;
  std::vector<std::string> tools;
};

// One piece of rendered text: a special token (emitted as its id, never tokenized) or plain text
// (tokenized); in_loss marks an assistant turn's content and its end token.
struct ChatSegment {
  std::string text;
  bool special = false;
  bool in_loss = false;
};

// Qwen2.5's system prompt for a conversation without one.
inline constexpr std::string_view kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

std::string_view chat_format_name(ChatFormat f);  // llama2 | llama3 | chatml
// A built-in template by name (llama2 | llama3 | chatml | chatml_plain | qwen3); Error naming the choices otherwise.
ChatTemplate builtin_chat_template(std::string_view name);
// Recognises a Jinja chat_template as one of the built-in families; Error naming `where`, the
// supported families and the key that chooses one explicitly when it is none of them.
ChatTemplate recognise_chat_template(const std::string& jinja, const std::string& where);
// `choice` is auto or a built-in name; auto reads the chat_template of tokenizer_config
// (a tokenizer_config.json path, "" when there is none) and recognises it.
ChatTemplate load_chat_template(std::string_view choice, const std::string& tokenizer_config);
// The tokenizer_config.json that `auto` reads: the one beside the tokenizer (a file, or a folder that
// holds it), else the one in `fallback_dir` (the model's folder; "" for none); "" when neither has one.
std::string find_tokenizer_config(const std::string& tokenizer_path, const std::string& fallback_dir);

// A JSONL row -> messages and tools: {"messages": [...]} as is (roles system, user, assistant, tool;
// an assistant's reasoning_content and tool_calls, whose content may then be null), with "tools" (a
// list, or a JSON string holding one, as LLaMA-Factory writes it); ShareGPT's {"conversations": [...]}
// with from human/user, gpt/assistant, system, observation/tool (a tool result) and function_call (an
// assistant's call: {"name", "arguments"} or a list of them, as JSON or its text); Alpaca's
// {instruction, input, output} as a user turn (instruction, a blank line and the input when it is
// non-empty) and an assistant turn.
// false with *why (a short reason that says the fix) for a row that is neither, or has an unknown
// role, a missing or non-string content, a malformed tool call.
bool chat_row(std::string_view json_line, ChatRow* row, std::string* why);
// A row -> segments of the template's text; false with *why when the conversation breaks the
// template's rules (Llama 2: user/assistant alternate after an optional first system message), holds
// what the template does not render (tools, tool calls or reasoning where it has none: never dropped
// silently) or, for training (no add_generation_prompt), has no assistant turn. add_generation_prompt
// appends the next assistant header: a prompt for generation.
bool render_chat(const ChatTemplate& t, const ChatRow& row, bool add_generation_prompt,
                 std::vector<ChatSegment>* segments, std::string* why);
bool render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                 std::vector<ChatSegment>* segments, std::string* why);
// Jinja's tojson as transformers defines it (Python's json.dumps with ", " and ": " separators and
// non-ASCII kept): the text chat templates put tool definitions and call arguments in. `json` is
// JSON text; its keys keep their order.
std::string chat_tojson(std::string_view json);
std::string chat_text(const std::vector<ChatSegment>& segments);  // the segments' text joined

// The special-token strings the template emits; Error naming each one the tokenizer lacks (as a
// piece or added token), the tokenizer and the fix.
std::vector<std::string> chat_special_tokens(const ChatTemplate& t);
// The token that ends an assistant turn (</s>, <|eot_id|>, <|im_end|>): where generation stops.
std::string chat_end_of_turn(const ChatTemplate& t);
void check_chat_tokens(const ChatTemplate& t, const Tokenizer& tok);
// Segments -> ids and, per id, 1 when it belongs to an in-loss segment. Special segments are their
// piece_to_id; each run of consecutive text segments is encoded as one text (so the ids are those
// of the whole rendered string split at the special tokens), and the ids of the run are given to
// its segments at the points where the encodings of the run's prefixes stop agreeing with it.
void encode_chat(const std::vector<ChatSegment>& segments, const Tokenizer& tok, std::vector<int>* ids,
                 std::vector<uint8_t>* in_loss);

}  // namespace llamatrain::data
