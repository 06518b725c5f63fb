// Pipeline schedules (1F1B, forward-only) and the runner that executes one stage's schedule with
// non-blocking point-to-point; why the runner cannot deadlock under either send semantics is argued
// above run_1f1b.
#include "parallel/pipeline.h"

#include <algorithm>

#include "core/error.h"

namespace llamatrain::parallel {

namespace {

void check_schedule_args(int stages, int stage, int micro_batches) {
  CHECK(stages >= 1 && stage >= 0 && stage < stages, "pipeline stage {} of {}", stage, stages);
  CHECK(micro_batches >= 1, "pipeline of {} micro-batches, expected at least 1", micro_batches);
}

// Tags: two per micro-batch, an activation (forward) and a gradient (backward), so that a watchdog
// message names the micro-batch awaited. Tags stop at 32767, so they wrap after 16384 micro-batches;
// that is harmless, because messages of one (source, tag) match in posting order and both sides post
// in micro order.
constexpr int kTagMicros = 16384;
int activation_tag(int micro) { return 2 * (micro % kTagMicros); }
int gradient_tag(int micro) { return 2 * (micro % kTagMicros) + 1; }

// The callbacks this stage's schedule calls are set.
void check_callbacks(const PipelineStage& stage, bool first, bool last, bool with_backward) {
  CHECK(stage.forward && (last || stage.output), "pipeline stage without forward or output callback");
  CHECK(!with_backward || (stage.backward && (first || stage.input_grad)),
        "pipeline stage without backward or input_grad callback");
}

}  // namespace

int pipeline_slots(int stages, int stage, int micro_batches) {
  check_schedule_args(stages, stage, micro_batches);
  return std::min(stages - stage, micro_batches);
}

std::vector<PipelineAction> schedule_1f1b(int stages, int stage, int micro_batches) {
  const int M = micro_batches, slots = pipeline_slots(stages, stage, M);
  const int warmup = std::min(stages - stage - 1, M);
  std::vector<PipelineAction> actions;
  auto forward = [&](int m) { actions.push_back({PipelineOp::forward, m, m % slots}); };
  auto backward = [&](int m) { actions.push_back({PipelineOp::backward, m, m % slots}); };
  for (int m = 0; m < warmup; ++m) forward(m);  // warmup: fill the stages after this one
  for (int m = 0; m < M - warmup; ++m) {        // steady state: one forward, one backward
    forward(m + warmup);
    backward(m);
  }
  for (int m = M - warmup; m < M; ++m) backward(m);  // cooldown: drain
  return actions;
}

std::vector<PipelineAction> schedule_forward_only(int stages, int stage, int micro_batches) {
  const int slots = pipeline_slots(stages, stage, micro_batches);
  std::vector<PipelineAction> actions;
  for (int m = 0; m < micro_batches; ++m) actions.push_back({PipelineOp::forward, m, m % slots});
  return actions;
}

std::string schedule_string(const std::vector<PipelineAction>& actions) {
  std::string s;
  for (const PipelineAction& a : actions) {
    if (!s.empty()) s += ' ';
    s += (a.op == PipelineOp::forward ? 'F' : 'B') + std::to_string(a.micro);
  }
  return s;
}

// Why run_1f1b cannot deadlock. Write W_s = min(P - s - 1, M) for stage s's warmup; W_{s+1} <= W_s.
// In schedule_1f1b's order, forward j comes after exactly the backwards i < j - W_s, and backward i
// after exactly the forwards j <= min(i + W_s, M - 1).
//
// Sends first. With LocalCommunicator a send is buffered and complete at once. Under MPI an isend may
// not complete until the receiver has posted (for large messages, rendezvous) the matching receive,
// and the data moves whenever both ranks are inside MPI calls, as a rank blocked in a wait is. The
// runner waits a send in three places, none of which needs the receiving stage's program to move on:
//  * the activation of micro m, before the forward of m + slots into the same slot: that forward comes
//    after backward m here, which needed the gradient of m from stage s + 1, sent after s + 1's
//    backward m, after its forward m, after it had received the activation: the transfer is done;
//  * this stage's input gradient of micro m, before its next backward: stage s - 1 posted the receive
//    of that gradient right after its forward m, before sending the activation of m, so before this
//    stage could start forward m;
//  * everything at the end: by then every message is received (activations) or its receive posted
//    (gradients), for the same reasons.
// So a rank blocks only in receive waits, as with buffered sends. Receives: suppose every rank left
// were blocked. Stage s in forward j, waiting for activation j: s - 1 is stuck before its forward j.
// Not in a backward i waiting for s: that i < j - W_{s-1} <= j - W_s, and s, at forward j, has done
// and sent every backward i < j - W_s. So s - 1 is in a forward waiting for s - 2, which is likewise,
// down to stage 0, which receives no activations: impossible. Stage s in backward i, waiting for a
// gradient: s + 1 is stuck before its backward i. Not in a forward j waiting for s: that
// j <= i + W_{s+1} <= i + W_s, and s, at backward i, has sent every forward j <= min(i + W_s, M - 1).
// So s + 1 is in a backward waiting for s + 2, and so on up to the last stage, which receives no
// gradients: impossible. (tests/parallel/pipeline_test.cpp also runs it with synchronous sends.)
void run_1f1b(Communicator& pp, int micro_batches, size_t activation_floats, const PipelineStage& stage) {
  const int P = pp.size(), s = pp.rank(), M = micro_batches;
  const bool first = s == 0, last = s == P - 1;
  const int slots = pipeline_slots(P, s, M);
  check_callbacks(stage, first, last, true);
  const size_t n = activation_floats, bytes = n * sizeof(float);
  std::vector<float> input(first ? 0 : size_t(slots) * n);   // (slots, n): received activations
  std::vector<float> doutput(last ? 0 : size_t(slots) * n);  // (slots, n): received gradients
  auto input_of = [&](int k) { return input.data() + size_t(k) * n; };
  auto doutput_of = [&](int k) { return doutput.data() + size_t(k) * n; };
  const size_t nslots = size_t(slots);
  std::vector<Request> input_recv(nslots), doutput_recv(nslots), output_send(nslots);
  Request input_grad_send;

  // The activation of micro m into its slot, posted as soon as the slot's previous micro is done.
  auto post_input = [&](int m) {
    if (first || m >= M) return;
    input_recv[size_t(m % slots)] = pp.irecv(input_of(m % slots), bytes, s - 1, activation_tag(m));
  };
  for (int m = 0; m < slots; ++m) post_input(m);

  for (const PipelineAction& a : schedule_1f1b(P, s, M)) {
    const int m = a.micro, k = a.slot;
    if (a.op == PipelineOp::forward) {
      input_recv[size_t(k)].wait();
      output_send[size_t(k)].wait();  // micro m - slots's output has left output(k)
      stage.forward(m, k, first ? nullptr : input_of(k));
      if (!last) {
        // The gradient's receive before the activation's send: posted before stage s + 1 can reply.
        doutput_recv[size_t(k)] = pp.irecv(doutput_of(k), bytes, s + 1, gradient_tag(m));
        output_send[size_t(k)] = pp.isend(stage.output(k), bytes, s + 1, activation_tag(m));
      }
    } else {
      doutput_recv[size_t(k)].wait();
      input_grad_send.wait();  // the previous backward's input_grad() has left
      stage.backward(m, k, last ? nullptr : doutput_of(k));
      if (!first) input_grad_send = pp.isend(stage.input_grad(), bytes, s - 1, gradient_tag(m));
      post_input(m + slots);  // input_of(k) is free: micro m is done with it
    }
  }
  input_grad_send.wait();
  for (Request& r : output_send) r.wait();
}

// The same buffers with forwards only; input_of(k) is free once forward m returns. A send of micro m
// is waited before the forward of m + slots: stage s + 1 posts that receive at the start or after its
// forward m - slots_{s+1}, and it gets there: it waits only for activations <= m, already sent, and
// for its own sends to s + 2, which wait on s + 3 likewise, up to the last stage, which sends nothing.
void run_forward_only(Communicator& pp, int micro_batches, size_t activation_floats, const PipelineStage& stage) {
  const int P = pp.size(), s = pp.rank(), M = micro_batches;
  const bool first = s == 0, last = s == P - 1;
  const int slots = pipeline_slots(P, s, M);
  check_callbacks(stage, first, last, false);
  const size_t n = activation_floats, bytes = n * sizeof(float);
  std::vector<float> input(first ? 0 : size_t(slots) * n);  // (slots, n): received activations
  auto input_of = [&](int k) { return input.data() + size_t(k) * n; };
  const size_t nslots = size_t(slots);
  std::vector<Request> input_recv(nslots), output_send(nslots);

  auto post_input = [&](int m) {
    if (first || m >= M) return;
    input_recv[size_t(m % slots)] = pp.irecv(input_of(m % slots), bytes, s - 1, activation_tag(m));
  };
  for (int m = 0; m < slots; ++m) post_input(m);

  for (const PipelineAction& a : schedule_forward_only(P, s, M)) {
    const int m = a.micro, k = a.slot;
    input_recv[size_t(k)].wait();
    output_send[size_t(k)].wait();
    stage.forward(m, k, first ? nullptr : input_of(k));
    if (!last) output_send[size_t(k)] = pp.isend(stage.output(k), bytes, s + 1, activation_tag(m));
    post_input(m + slots);
  }
  for (Request& r : output_send) r.wait();
}

}  // namespace llamatrain::parallel
