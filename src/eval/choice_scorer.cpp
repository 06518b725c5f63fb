// Multiple-choice scoring: fit and encode each question (prepare_question), run its sequences in
// length-sorted batches, read the log-softmax at the scored positions, take the argmax.
#include "eval/choice_scorer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "data/tokenizer.h"
#include "eval/prompts.h"
#include "model/llama.h"
#include "obs/progress.h"

namespace llamatrain::eval {

namespace {

constexpr int kLengthStep = 64;  // batch lengths are rounded up to this: few activation shapes

// The harness's split of context + continuation: the continuation is what encoding the whole holds
// past the context's own encoding's length.
struct ChoiceTokens {
  std::vector<int> context, continuation;
};

ChoiceTokens encode_choice(const data::Tokenizer& tok, const std::string& context, size_t context_length, int choice) {
  const std::vector<int> whole = tok.encode(context + continuation(choice));
  CHECK(whole.size() > context_length, "the continuation of choice {} encodes to no token", choice);
  return {std::vector<int>(whole.begin(), whole.begin() + std::ptrdiff_t(context_length)),
          std::vector<int>(whole.begin() + std::ptrdiff_t(context_length), whole.end())};
}

// The sequences of one context: one when all four continuations are single tokens after the same
// context tokens, else one per choice (prefix + context + continuation minus its last token).
void build_sequences(PreparedQuestion* p, int question, const std::vector<int32_t>& prefix,
                     const std::array<ChoiceTokens, 4>& choices) {
  p->sequences.clear();
  bool one_pass = true;
  for (const auto& c : choices) one_pass = one_pass && c.continuation.size() == 1 && c.context == choices[0].context;
  p->one_pass = one_pass;
  for (int c = 0; c < 4; c++) p->continuation_tokens[size_t(c)] = int(choices[size_t(c)].continuation.size());
  if (one_pass) {
    ChoiceSequence s{question, prefix, {}};
    s.tokens.insert(s.tokens.end(), choices[0].context.begin(), choices[0].context.end());
    for (int c = 0; c < 4; c++) s.scored.push_back({int(s.tokens.size()) - 1, choices[size_t(c)].continuation[0], c});
    p->sequences.push_back(std::move(s));
    return;
  }
  for (int c = 0; c < 4; c++) {
    const ChoiceTokens& ct = choices[size_t(c)];
    ChoiceSequence s{question, prefix, {}};
    s.tokens.insert(s.tokens.end(), ct.context.begin(), ct.context.end());
    for (size_t j = 0; j < ct.continuation.size(); j++) {
      s.scored.push_back({int(s.tokens.size()) - 1, ct.continuation[j], c});
      s.tokens.push_back(ct.continuation[j]);
    }
    s.tokens.pop_back();  // the last continuation token is predicted, never read
    p->sequences.push_back(std::move(s));
  }
}

int64_t longest(const PreparedQuestion& p) {
  int64_t n = 0;
  for (const auto& s : p.sequences) n = std::max<int64_t>(n, int64_t(s.tokens.size()));
  return n;
}

// No example left and still too long: keep each sequence's last `seq` tokens, as the harness does.
void cut_front(PreparedQuestion* p, int seq) {
  for (auto& s : p->sequences) {
    const int drop = int(s.tokens.size()) - seq;
    if (drop <= 0) continue;
    s.tokens.erase(s.tokens.begin(), s.tokens.begin() + drop);
    for (auto& t : s.scored) {
      t.position -= drop;
      CHECK(t.position >= 0, "a continuation longer than the sequence length {}", seq);
    }
  }
  p->cut = true;
}

// The argmax, the first on ties (numpy's argmax, which the harness uses).
template <typename F>
int argmax(F value) {
  int best = 0;
  for (int c = 1; c < 4; c++)
    if (value(c) > value(best)) best = c;
  return best;
}

// One batch of sequences through the model: their scored log-probabilities added to the questions'.
void run_batch(model::LlamaModel& m, const std::vector<const ChoiceSequence*>& batch, int seq,
               std::vector<ScoredQuestion>* out) {
  const int B = int(batch.size());
  int T = 0;
  for (const auto* s : batch) T = std::max(T, int(s->tokens.size()));
  T = std::min(seq, (T + kLengthStep - 1) / kLengthStep * kLengthStep);
  // Padded at the end: a causal model's logits at a position do not see what comes after it.
  std::vector<int32_t> tokens(size_t(B) * size_t(T), 0);
  std::vector<int64_t> rows;   // distinct (sequence, position) rows, in order
  std::vector<size_t> row_of;  // per scored token of the batch, in order: its index into rows
  for (int b = 0; b < B; b++) {
    std::copy(batch[size_t(b)]->tokens.begin(), batch[size_t(b)]->tokens.end(), tokens.begin() + int64_t(b) * T);
    for (const auto& st : batch[size_t(b)]->scored) {
      const int64_t row = int64_t(b) * T + st.position;
      if (rows.empty() || rows.back() != row) rows.push_back(row);
      row_of.push_back(rows.size() - 1);
    }
  }
  m.forward(tokens.data(), nullptr, B, T);
  const int V = m.config().vocab_size;
  std::vector<float> logits(rows.size() * size_t(V));
  m.logits_rows(logits.data(), rows.data(), int(rows.size()));
  // log-softmax in double at each row: logit - log(sum exp(logits)).
  std::vector<double> lse(rows.size());
  for (size_t r = 0; r < rows.size(); r++) {
    const float* x = logits.data() + r * size_t(V);
    const double mx = *std::max_element(x, x + V);
    double sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(double(x[v]) - mx);
    lse[r] = mx + std::log(sum);
  }
  size_t k = 0;
  for (const auto* s : batch)
    for (const auto& st : s->scored) {
      const size_t r = row_of[k++];
      (*out)[size_t(s->question)].loglik[size_t(st.choice)] +=
          double(logits[r * size_t(V) + size_t(st.token)]) - lse[r];
    }
}

// Whether this rank scores the question of global index q (in subject and file order).
bool mine(const ScoreOptions& o, int64_t q) { return o.ranks <= 1 || q % o.ranks == o.rank; }

// One subject's questions (those of this rank; the others keep only their place): prepared, batched by
// length (longest first), scored. `first` is the subject's first question's global index.
void score_subject(model::LlamaModel& m, const data::Tokenizer& tok, const Benchmark& b, int subject, int64_t first,
                   const ScoreOptions& o, obs::Progress& progress, std::vector<ScoredQuestion>* all) {
  const Subject& s = b.subjects[size_t(subject)];
  std::vector<ScoredQuestion> out(s.questions.size());
  std::vector<int> remaining(s.questions.size());
  std::vector<const ChoiceSequence*> order;
  for (size_t i = 0; i < s.questions.size(); i++) {
    out[i].answer = s.questions[i].answer;
    out[i].prepared.subject = subject;
    out[i].prepared.index = int(i);
    if (!mine(o, first + int64_t(i))) continue;
    out[i].prepared = prepare_question(tok, b, subject, int(i), o);
    for (auto& seq : out[i].prepared.sequences) seq.question = int(i);
  }
  for (size_t i = 0; i < out.size(); i++) {
    remaining[i] = int(out[i].prepared.sequences.size());
    for (const auto& seq : out[i].prepared.sequences) order.push_back(&seq);
  }
  std::stable_sort(order.begin(), order.end(), [](const ChoiceSequence* x, const ChoiceSequence* y) {
    return x->tokens.size() > y->tokens.size();
  });
  for (size_t first = 0; first < order.size(); first += size_t(o.batch)) {
    const std::vector<const ChoiceSequence*> batch(
        order.begin() + std::ptrdiff_t(first),
        order.begin() + std::ptrdiff_t(std::min(order.size(), first + size_t(o.batch))));
    run_batch(m, batch, o.seq, &out);
    for (const auto* seq : batch)
      if (--remaining[size_t(seq->question)] == 0) progress.advance(1);
  }
  for (auto& q : out) {
    for (auto& seq : q.prepared.sequences) seq.tokens = {};  // scored: the ids are not needed any more
    all->push_back(std::move(q));
  }
}

// The figures of every question to every rank: each rank's own, summed with the others' zeros.
void share_scores(const ScoreOptions& o, std::vector<ScoredQuestion>* all) {
  constexpr size_t kFields = 12;  // loglik x 4, shots, cut, one_pass, tokens, continuation_tokens x 4
  std::vector<double> packed(all->size() * kFields, 0.0);
  for (size_t q = 0; q < all->size(); q++) {
    if (!mine(o, int64_t(q))) continue;
    const ScoredQuestion& s = (*all)[q];
    double* f = packed.data() + q * kFields;
    for (size_t c = 0; c < 4; c++) f[c] = s.loglik[c], f[8 + c] = s.prepared.continuation_tokens[c];
    f[4] = s.prepared.shots, f[5] = s.prepared.cut, f[6] = s.prepared.one_pass, f[7] = double(s.prepared.tokens);
  }
  CHECK(o.sum_over_ranks, "score_benchmark over {} ranks without a sum over them", o.ranks);
  o.sum_over_ranks(packed.data(), packed.size());
  for (size_t q = 0; q < all->size(); q++) {
    ScoredQuestion& s = (*all)[q];
    const double* f = packed.data() + q * kFields;
    for (size_t c = 0; c < 4; c++) s.loglik[c] = f[c], s.prepared.continuation_tokens[c] = int(f[8 + c]);
    s.prepared.shots = int(f[4]), s.prepared.cut = f[5] != 0, s.prepared.one_pass = f[6] != 0;
    s.prepared.tokens = int64_t(f[7]);
  }
}

}  // namespace

PreparedQuestion prepare_question(const data::Tokenizer& tok, const Benchmark& b, int subject, int index,
                                  const ScoreOptions& o) {
  const Subject& s = b.subjects[size_t(subject)];
  const Question& q = s.questions[size_t(index)];
  std::vector<int32_t> prefix;
  if (tok.bos_id() >= 0) prefix.push_back(tok.bos_id());
  PreparedQuestion p;
  p.subject = subject;
  p.index = index;
  for (int k = std::min(o.shots, int(s.dev.size()));; k--) {
    const std::string context = build_context(*b.task, s, k, q);
    const size_t context_length = tok.encode(context).size();
    std::array<ChoiceTokens, 4> choices;
    for (int c = 0; c < 4; c++) choices[size_t(c)] = encode_choice(tok, context, context_length, c);
    build_sequences(&p, index, prefix, choices);
    p.shots = k;
    p.tokens = longest(p);
    if (o.keep_prompts) p.context = context;
    if (p.tokens <= o.seq) return p;
    if (k == 0) break;
  }
  cut_front(&p, o.seq);
  p.tokens = longest(p);
  return p;
}

std::vector<ScoredQuestion> score_benchmark(model::LlamaModel& m, const data::Tokenizer& tok, const Benchmark& b,
                                            const ScoreOptions& o) {
  CHECK(o.seq > 0 && o.batch > 0);
  CHECK(o.ranks >= 1 && o.rank >= 0 && o.rank < o.ranks);
  int64_t own = 0;
  for (int64_t q = 0; q < b.num_questions(); q++) own += mine(o, q);
  obs::ProgressOptions po;
  po.label = std::string(b.task->title) + (o.ranks > 1 ? fmt::format(" (rank 0's share of {} ranks)", o.ranks) : "");
  po.total = own;
  po.noun = "questions";
  if (o.rank != 0) po.style = obs::ProgressStyle::kOff;
  obs::Progress progress(po);
  std::vector<ScoredQuestion> out;
  out.reserve(size_t(b.num_questions()));
  int64_t first = 0;
  for (int s = 0; s < int(b.subjects.size()); s++) {
    score_subject(m, tok, b, s, first, o, progress, &out);
    first += int64_t(b.subjects[size_t(s)].questions.size());
  }
  progress.finish();
  if (o.ranks > 1) share_scores(o, &out);
  for (size_t q = 0; q < out.size(); q++) {
    ScoredQuestion& s = out[q];
    s.predicted = argmax([&](int c) { return s.loglik[size_t(c)]; });
    s.predicted_norm = argmax([&](int c) { return s.loglik[size_t(c)] / double(continuation(c).size() - 1); });
    if (o.keep_prompts && o.rank == 0 && !mine(o, int64_t(q)))  // another rank's question: its prompt again
      s.prepared.context = prepare_question(tok, b, s.prepared.subject, s.prepared.index, o).context;
  }
  return out;
}

}  // namespace llamatrain::eval
