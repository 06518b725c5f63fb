// parallel/pipeline: the 1F1B and forward-only schedules (every micro-batch forwarded and backwarded
// once per stage, in-flight micro-batches within the slots and in distinct slots, Megatron's order on
// hand-written cases, the stages together never deadlock), and the runner on toy stages
// y = a_s * x + b_s whose losses and parameter gradients must equal one process's, on 1-4 thread
// ranks with buffered sends (LocalCommunicator) and with synchronous sends that also check each send
// buffer stays untouched until its send completes (what MPI requires).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <set>

#include "collective_checks.h"
#include "parallel/layout.h"
#include "parallel/local_communicator.h"
#include "parallel/pipeline.h"
#include "parallel/watchdog.h"

namespace llamatrain::parallel {

// How gtest prints an action (found by argument-dependent lookup, so outside the unnamed namespace).
void PrintTo(const PipelineAction& a, std::ostream* os) { *os << schedule_string({a}) << " slot " << a.slot; }

namespace {

using testing::expect_close;
using testing::noise;
using testing::noise_vector;
using testing::test_options;

// ---- schedules ----

TEST(PipelineSchedule, MegatronOrder) {
  EXPECT_EQ(schedule_string(schedule_1f1b(4, 0, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(schedule_string(schedule_1f1b(4, 1, 6)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(schedule_string(schedule_1f1b(4, 3, 6)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  EXPECT_EQ(schedule_string(schedule_1f1b(4, 0, 2)), "F0 F1 B0 B1");  // fewer micro-batches than stages
  EXPECT_EQ(schedule_string(schedule_1f1b(3, 1, 1)), "F0 B0");
  EXPECT_EQ(schedule_string(schedule_1f1b(1, 0, 3)), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(schedule_string(schedule_forward_only(4, 1, 4)), "F0 F1 F2 F3");
  EXPECT_EQ(pipeline_slots(4, 0, 6), 4);
  EXPECT_EQ(pipeline_slots(4, 3, 6), 1);
  EXPECT_EQ(pipeline_slots(4, 0, 2), 2);
  const auto a = schedule_1f1b(4, 0, 6);
  EXPECT_EQ(a[4], (PipelineAction{PipelineOp::backward, 0, 0}));
  EXPECT_EQ(a[5], (PipelineAction{PipelineOp::forward, 4, 0}));  // micro 4 reuses micro 0's slot
}

TEST(PipelineSchedule, EveryMicroOnceWithinTheSlots) {
  for (int P = 1; P <= 5; ++P)
    for (int s = 0; s < P; ++s)
      for (int M = 1; M <= 9; ++M) {
        SCOPED_TRACE("P " + std::to_string(P) + " stage " + std::to_string(s) + " M " + std::to_string(M));
        const int slots = pipeline_slots(P, s, M);
        EXPECT_EQ(slots, std::min(P - s, M));
        const auto actions = schedule_1f1b(P, s, M);
        ASSERT_EQ(actions.size(), size_t(2 * M)) << schedule_string(actions);
        std::vector<int> forwarded(size_t(M), 0), backwarded(size_t(M), 0);
        std::set<int> in_flight, slots_used;  // micro-batches forwarded and not yet backwarded, their slots
        size_t most_in_flight = 0;
        for (const PipelineAction& a : actions) {
          ASSERT_TRUE(a.micro >= 0 && a.micro < M) << schedule_string(actions);
          EXPECT_EQ(a.slot, a.micro % slots);
          if (a.op == PipelineOp::forward) {
            EXPECT_EQ(forwarded[size_t(a.micro)]++, 0) << "forwarded twice: " << a.micro;
            EXPECT_TRUE(slots_used.insert(a.slot).second) << "slot " << a.slot << " in use at F" << a.micro;
            in_flight.insert(a.micro);
            most_in_flight = std::max(most_in_flight, in_flight.size());
          } else {
            EXPECT_EQ(forwarded[size_t(a.micro)], 1) << "B" << a.micro << " before its forward";
            EXPECT_EQ(backwarded[size_t(a.micro)]++, 0) << "backwarded twice: " << a.micro;
            in_flight.erase(a.micro);
            slots_used.erase(a.slot);
          }
        }
        EXPECT_EQ(forwarded, std::vector<int>(size_t(M), 1));
        EXPECT_EQ(backwarded, std::vector<int>(size_t(M), 1));
        EXPECT_EQ(most_in_flight, size_t(slots)) << "the slots are all needed";
        // micro-batches are forwarded, and backwarded, in order
        std::vector<int> f_order, b_order;
        for (const PipelineAction& a : actions) (a.op == PipelineOp::forward ? f_order : b_order).push_back(a.micro);
        EXPECT_TRUE(std::is_sorted(f_order.begin(), f_order.end()));
        EXPECT_TRUE(std::is_sorted(b_order.begin(), b_order.end()));

        const auto fwd = schedule_forward_only(P, s, M);
        ASSERT_EQ(fwd.size(), size_t(M));
        for (int m = 0; m < M; ++m) EXPECT_EQ(fwd[size_t(m)], (PipelineAction{PipelineOp::forward, m, m % slots}));
      }
}

// All stages' schedules together complete with buffered sends: forward m on stage s needs forward m
// of s - 1, backward m needs backward m of s + 1. Each round runs every stage as far as it can.
TEST(PipelineSchedule, StagesTogetherNeverDeadlock) {
  for (int P = 1; P <= 5; ++P)
    for (int M = 1; M <= 9; ++M) {
      std::vector<std::vector<PipelineAction>> program;
      for (int s = 0; s < P; ++s) program.push_back(schedule_1f1b(P, s, M));
      std::vector<size_t> pc(size_t(P), 0);
      const std::vector<bool> none(static_cast<size_t>(M), false);
      std::vector<std::vector<bool>> fdone(static_cast<size_t>(P), none), bdone = fdone;  // [stage][micro] done
      for (bool moved = true; moved;) {
        moved = false;
        for (int s = 0; s < P; ++s)
          while (pc[size_t(s)] < program[size_t(s)].size()) {
            const PipelineAction& a = program[size_t(s)][pc[size_t(s)]];
            const size_t m = size_t(a.micro);
            if (a.op == PipelineOp::forward) {
              if (s > 0 && !fdone[size_t(s - 1)][m]) break;
              fdone[size_t(s)][m] = true;
            } else {
              if (s < P - 1 && !bdone[size_t(s + 1)][m]) break;
              bdone[size_t(s)][m] = true;
            }
            ++pc[size_t(s)];
            moved = true;
          }
      }
      for (int s = 0; s < P; ++s)
        EXPECT_EQ(pc[size_t(s)], size_t(2 * M)) << "P " << P << " M " << M << ": stage " << s << " stuck at "
                                                << pc[size_t(s)] << " of " << schedule_string(program[size_t(s)]);
    }
}

// ---- a communicator with synchronous sends ----

// Wraps a LocalCommunicator's point-to-point in MPI's weakest guarantees, and some stricter:
//  * a send completes only once its receive has completed (MPI may need only a posted receive): a
//    rank acknowledges every receive it finishes, on a second communicator;
//  * the data is taken when the send starts, and its completion checks the buffer still holds it: a
//    runner that reused a send buffer early would have sent garbage under MPI;
//  * posting a receive fills its buffer with NaNs, so that reading it before the receive is waited
//    (or after the next receive into it is posted) spoils the results.
// Collectives are not needed by the runner and abort.
class SynchronousSends : public Communicator {
 public:
  SynchronousSends(Communicator& inner, Watchdog& unwatched)
      : Communicator(inner.rank(), inner.world_ranks(), inner.name() + "_sync", &unwatched,
                     unwatched.add_slot(inner.world_rank())),
        inner_(inner),
        acks_(inner.split(0, inner.rank(), inner.name() + "_acks")) {}

  [[noreturn]] void abort(const std::string& message) override {
    inner_.abort(message);
    std::abort();  // not reached: inner_.abort does not return
  }

 protected:
  class Send : public Request::Impl {
   public:
    Send(Communicator& acks, const void* data, size_t bytes, int dest, int tag, std::string what)
        : acks_(acks),
          data_(data),
          sent_(static_cast<const char*>(data), static_cast<const char*>(data) + bytes),
          dest_(dest),
          tag_(tag),
          what_(std::move(what)) {}
    void wait() override {
      acks_.irecv(nullptr, 0, dest_, tag_).wait();
      EXPECT_TRUE(sent_.empty() || std::memcmp(data_, sent_.data(), sent_.size()) == 0)
          << what_ << ": the send buffer changed before the send completed";
    }

   private:
    Communicator& acks_;
    const void* data_;
    std::vector<char> sent_;
    int dest_, tag_;
    std::string what_;
  };
  class Recv : public Request::Impl {
   public:
    Recv(Request inner, Communicator& acks, int source, int tag)
        : inner_(std::move(inner)), acks_(acks), source_(source), tag_(tag) {}
    void wait() override {
      inner_.wait();
      acks_.isend(nullptr, 0, source_, tag_).wait();
    }

   private:
    Request inner_;
    Communicator& acks_;
    int source_, tag_;
  };

  Request do_isend(const void* data, size_t bytes, int dest, int tag, std::string what) override {
    inner_.isend(data, bytes, dest, tag).wait();  // buffered: complete at once
    return Request(std::make_unique<Send>(*acks_, data, bytes, dest, tag, std::move(what)));
  }
  Request do_irecv(void* data, size_t bytes, int source, int tag, std::string) override {
    if (bytes) std::memset(data, 0xff, bytes);  // NaNs: what a reader of a pending receive would see
    return Request(std::make_unique<Recv>(inner_.irecv(data, bytes, source, tag), *acks_, source, tag));
  }
  void do_all_reduce(void*, size_t, DType) override { unused("all_reduce"); }
  Request do_iall_reduce(void*, size_t, DType) override { unused("iall_reduce"); }
  void do_all_gather(void*, const void*, size_t, DType) override { unused("all_gather"); }
  void do_reduce_scatter(void*, const void*, size_t, DType) override { unused("reduce_scatter"); }
  void do_broadcast(void*, size_t, int) override { unused("broadcast"); }
  void do_barrier() override { unused("barrier"); }
  std::unique_ptr<Communicator> do_split(int, int, const std::string&) override { unused("split"); }

 private:
  [[noreturn]] void unused(const char* op) {
    inner_.abort(std::string(op) + " on SynchronousSends");
    std::abort();  // not reached
  }

  Communicator& inner_;
  std::unique_ptr<Communicator> acks_;
};

// ---- the runner on toy stages ----

// Stage s: y = a_s * x + b_s elementwise on n elements; stage 0's input of micro m is noise(m, i);
// the last stage's loss is 0.5 * sum(y^2), so its dy = y. Backward: dx = a_s * dy, da_s += x * dy,
// db_s += dy.
std::vector<float> weight_a(int s, size_t n) { return noise_vector(100 + uint64_t(s), n); }
std::vector<float> weight_b(int s, size_t n) { return noise_vector(200 + uint64_t(s), n); }
std::vector<float> first_input(int m, size_t n) { return noise_vector(1000 + uint64_t(m), n); }

struct Expected {
  std::vector<float> loss;                 // (M)
  std::vector<std::vector<float>> da, db;  // (P, n)
};

// One process, micro-batch after micro-batch through every stage.
Expected sequential(int P, int M, size_t n) {
  Expected e{
      std::vector<float>(size_t(M)), std::vector<std::vector<float>>(size_t(P), std::vector<float>(n, 0.0f)), {}};
  e.db = e.da;
  for (int m = 0; m < M; ++m) {
    std::vector<std::vector<float>> x(size_t(P) + 1);  // x[s]: input of stage s; x[P]: last output
    x[0] = first_input(m, n);
    for (int s = 0; s < P; ++s) {
      const auto a = weight_a(s, n), b = weight_b(s, n);
      x[size_t(s) + 1].resize(n);
      for (size_t i = 0; i < n; ++i) x[size_t(s) + 1][i] = a[i] * x[size_t(s)][i] + b[i];
    }
    float loss = 0;
    for (float y : x[size_t(P)]) loss += 0.5f * y * y;
    e.loss[size_t(m)] = loss;
    std::vector<float> dy = x[size_t(P)];
    for (int s = P - 1; s >= 0; --s) {
      const auto a = weight_a(s, n);
      for (size_t i = 0; i < n; ++i) {
        e.da[size_t(s)][i] += x[size_t(s)][i] * dy[i];
        e.db[size_t(s)][i] += dy[i];
        dy[i] *= a[i];
      }
    }
  }
  return e;
}

// This rank's stage, run over `pp` with 1F1B (or forward-only) and checked against sequential().
// The stage keeps `input` by pointer until the backward, as the runner promises it may.
void check_toy_pipeline(Communicator& pp, int M, size_t n, bool forward_only) {
  const int P = pp.size(), s = pp.rank(), slots = pipeline_slots(P, s, M);
  const bool first = s == 0, last = s == P - 1;
  const std::string where = "P " + std::to_string(P) + " stage " + std::to_string(s) + " M " + std::to_string(M) +
                            " n " + std::to_string(n) + (forward_only ? " forward-only" : " 1F1B");
  const auto a = weight_a(s, n), b = weight_b(s, n);
  std::vector<float> da(n, 0.0f), db(n, 0.0f), dx(n), loss(size_t(M), -1.0f);
  const size_t nslots = size_t(slots);
  std::vector<std::vector<float>> x_first(nslots), y(nslots, std::vector<float>(n));  // per slot: (n)
  std::vector<const float*> x(nslots, nullptr);  // per slot: the forward's input, kept for the backward
  std::vector<int> micro_in(nslots, -1);         // per slot: the micro-batch awaiting its backward
  std::vector<PipelineAction> called;

  PipelineStage stage;
  stage.forward = [&](int m, int k, const float* input) {
    called.push_back({PipelineOp::forward, m, k});
    EXPECT_EQ(input == nullptr, first) << where;
    EXPECT_EQ(micro_in[size_t(k)], -1) << where << ": slot " << k << " still holds micro " << micro_in[size_t(k)];
    if (!forward_only) micro_in[size_t(k)] = m;
    if (first) {
      x_first[size_t(k)] = first_input(m, n);
      input = x_first[size_t(k)].data();
    }
    x[size_t(k)] = input;
    for (size_t i = 0; i < n; ++i) y[size_t(k)][i] = a[i] * input[i] + b[i];
    if (last) {
      float l = 0;
      for (float v : y[size_t(k)]) l += 0.5f * v * v;
      loss[size_t(m)] = l;
    }
  };
  stage.output = [&](int k) {
    EXPECT_FALSE(last) << where;
    return y[size_t(k)].data();
  };
  stage.backward = [&](int m, int k, const float* doutput) {
    called.push_back({PipelineOp::backward, m, k});
    EXPECT_FALSE(forward_only) << where;
    EXPECT_EQ(doutput == nullptr, last) << where;
    EXPECT_EQ(micro_in[size_t(k)], m) << where << ": slot " << k;
    micro_in[size_t(k)] = -1;
    const float* dy = last ? y[size_t(k)].data() : doutput;
    for (size_t i = 0; i < n; ++i) {
      da[i] += x[size_t(k)][i] * dy[i];
      db[i] += dy[i];
      dx[i] = a[i] * dy[i];
    }
  };
  stage.input_grad = [&]() {
    EXPECT_FALSE(first) << where;
    return dx.data();
  };

  if (forward_only)
    run_forward_only(pp, M, n, stage);
  else
    run_1f1b(pp, M, n, stage);

  EXPECT_EQ(called, forward_only ? schedule_forward_only(P, s, M) : schedule_1f1b(P, s, M)) << where;
  const Expected want = sequential(P, M, n);
  if (last) expect_close(loss, want.loss, where + " losses");
  if (!forward_only) {
    expect_close(da, want.da[size_t(s)], where + " da");
    expect_close(db, want.db[size_t(s)], where + " db");
  }
}

void check_all_sizes(Communicator& pp, bool synchronous) {
  std::unique_ptr<Watchdog> unwatched;
  std::unique_ptr<SynchronousSends> sync;
  if (synchronous) {
    unwatched = std::make_unique<Watchdog>(0, [](const std::string&) { std::abort(); });
    sync = std::make_unique<SynchronousSends>(pp, *unwatched);
  }
  Communicator& c = synchronous ? static_cast<Communicator&>(*sync) : pp;
  for (int M : {1, 2, 3, 7})
    for (size_t n : {size_t(1), size_t(5)}) {
      check_toy_pipeline(c, M, n, false);
      check_toy_pipeline(c, M, n, true);
    }
}

TEST(PipelineRunner, ToyStagesMatchOneProcess) {
  for (int P : {1, 2, 3, 4})
    run_local_ranks(
        P, [](Communicator& pp) { check_all_sizes(pp, false); }, test_options());
}

TEST(PipelineRunner, ToyStagesWithSynchronousSends) {
  for (int P : {2, 3, 4})
    run_local_ranks(
        P, [](Communicator& pp) { check_all_sizes(pp, true); }, test_options());
}

TEST(PipelineRunner, PipelineGroupsOfAMixedLayout) {
  // PP 4 inside 8 ranks (TP 1, DP 2): two pipelines at once on split communicators.
  run_local_ranks(
      8,
      [](Communicator& world) {
        const ParallelLayout l = ParallelLayout::make(world.size(), 1, 4, world.rank());
        ParallelGroups g = ParallelGroups::make(world, l);
        check_toy_pipeline(*g.pp, 5, 3, false);
        check_toy_pipeline(*g.pp, 5, 3, true);
      },
      test_options());
}

TEST(PipelineRunner, MoreMicroBatchesThanTags) {
  // Tags wrap after 16384 micro-batches; messages of one tag still match in order.
  run_local_ranks(
      2, [](Communicator& pp) { check_toy_pipeline(pp, 16384 + 5, 1, false); }, test_options());
}

}  // namespace
}  // namespace llamatrain::parallel
