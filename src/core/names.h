// How an error names the values a rule is about. A rule is written once, in the layer that owns it
// (the model's shape rules in model/, the rank layout's in parallel/), and speaks that layer's terms
// by default ("n_heads", "tensor parallel size"); a caller with names of its own (the YAML config's
// keys) passes them, so the same rule reads "model.num_attention_heads (train.yaml:4:3): got 7,
// expected a divisor of hidden_size 768" there. Fields a caller does not rename keep their own names.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>

namespace llamatrain {

class FieldNames {
 public:
  using Head = std::function<std::string(const std::string& field)>;
  // prefix: put before the head of every message ("config tiny.json: "); names: field -> its name in a
  // sentence; head: field -> what opens a message about it (default: its name).
  explicit FieldNames(std::string prefix = "", std::map<std::string, std::string> names = {}, Head head = {})
      : prefix_(std::move(prefix)), names_(std::move(names)), head_(std::move(head)) {}

  // The field's name inside a sentence: "expected a divisor of hidden_size 768".
  std::string operator()(const std::string& field) const {
    const auto it = names_.find(field);
    return it == names_.end() ? field : it->second;
  }
  // What opens an error about the field: "config tiny.json: n_heads", "model.num_attention_heads (override ...)".
  std::string head(const std::string& field) const { return prefix_ + (head_ ? head_(field) : (*this)(field)); }

 private:
  std::string prefix_;
  std::map<std::string, std::string> names_;
  Head head_;
};

}  // namespace llamatrain
