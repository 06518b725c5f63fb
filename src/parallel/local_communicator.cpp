// LocalCommunicator: a Group is shared by the members of one communicator; each collective publishes
// one pointer per rank, meets at the group's barrier, lets every rank read what it needs (into a
// private buffer when its own buffer is also an input), meets again so no buffer is released while
// read, then writes the result. Two barriers per collective; a rank's next collective cannot read a
// buffer before its owner published it anew, so no third one is needed.
#include "parallel/local_communicator.h"

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <tuple>

#include "core/error.h"
#include "parallel/watchdog.h"

namespace llamatrain::parallel {
namespace {

struct Group {
  explicit Group(int n) : size(n), sync(n), published(size_t(n)), split_in(size_t(n)) {}

  struct SplitRequest {
    int color = -1, key = 0, world_rank = 0;
  };

  const int size;
  std::barrier<> sync;
  std::vector<const void*> published;  // (size) each rank's buffer for the current collective
  std::vector<SplitRequest> split_in;  // (size) each rank's (color, key) for the current split
  std::mutex split_mutex;
  std::map<int, std::shared_ptr<Group>> split_out;  // color -> the new group, made by its first member

  std::mutex mail_mutex;
  std::condition_variable mail_arrived;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<std::byte>>> mail;  // (source, dest, tag) -> messages
};

[[noreturn]] void abort_process(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

// Sum over ranks, in rank order, of element [offset, offset + count) of every published buffer.
template <typename T>
std::vector<T> sum_published(const Group& g, size_t offset, size_t count) {
  std::vector<T> sum(count, T(0));
  for (int r = 0; r < g.size; ++r) {
    const T* x = static_cast<const T*>(g.published[size_t(r)]) + offset;
    for (size_t i = 0; i < count; ++i) sum[i] += x[i];
  }
  return sum;
}

void sum_published_into(void* out, const Group& g, size_t offset, size_t count, DType dtype) {
  if (count == 0) return;
  if (dtype == DType::f32) {
    const auto sum = sum_published<float>(g, offset, count);
    std::memcpy(out, sum.data(), count * sizeof(float));
  } else {
    const auto sum = sum_published<double>(g, offset, count);
    std::memcpy(out, sum.data(), count * sizeof(double));
  }
}

class LocalRecv : public Request::Impl {
 public:
  LocalRecv(std::shared_ptr<Group> group, std::tuple<int, int, int> route, void* data, size_t bytes, Watchdog* watchdog,
            int slot, std::string what)
      : group_(std::move(group)),
        route_(route),
        data_(data),
        bytes_(bytes),
        watchdog_(watchdog),
        slot_(slot),
        what_(std::move(what)) {}

  void wait() override {
    WatchdogScope scope(watchdog_, slot_, "wait for " + what_);
    std::unique_lock lock(group_->mail_mutex);
    auto& queue = group_->mail[route_];
    group_->mail_arrived.wait(lock, [&] { return !queue.empty(); });
    std::vector<std::byte> message = std::move(queue.front());
    queue.pop_front();
    lock.unlock();
    if (message.size() != bytes_)
      abort_process(fmt::format("[rank {}] {}: received {} bytes, expected {}", std::get<1>(route_), what_,
                                message.size(), bytes_));
    if (bytes_) std::memcpy(data_, message.data(), bytes_);
  }

 private:
  std::shared_ptr<Group> group_;
  std::tuple<int, int, int> route_;  // (source, dest, tag), ranks of the group
  void* data_;
  size_t bytes_;
  Watchdog* watchdog_;
  int slot_;
  std::string what_;
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(int rank, std::vector<int> world_ranks, std::string name, std::shared_ptr<Group> group,
                    Watchdog* watchdog, int slot)
      : Communicator(rank, std::move(world_ranks), std::move(name), watchdog, slot), group_(std::move(group)) {
    CHECK(group_->size == size());
  }

  [[noreturn]] void abort(const std::string& message) override {
    abort_process(fmt::format("[rank {}] abort: {}", world_rank(), message));
  }

 protected:
  void do_all_reduce(void* data, size_t count, DType dtype) override {
    Group& g = *group_;
    g.published[size_t(rank())] = data;
    g.sync.arrive_and_wait();
    std::vector<std::byte> result(count * dtype_size(dtype));
    sum_published_into(result.data(), g, 0, count, dtype);
    g.sync.arrive_and_wait();
    if (count) std::memcpy(data, result.data(), result.size());
  }

  Request do_iall_reduce(void* data, size_t count, DType dtype) override {
    WatchdogScope scope(watchdog(), watchdog_slot(), current_operation());
    do_all_reduce(data, count, dtype);
    return Request();
  }

  void do_all_gather(void* out, const void* in, size_t count, DType dtype) override {
    Group& g = *group_;
    const size_t block = count * dtype_size(dtype);
    g.published[size_t(rank())] = in;
    g.sync.arrive_and_wait();
    for (int r = 0; r < g.size; ++r) {
      char* dst = static_cast<char*>(out) + size_t(r) * block;
      if (block && dst != g.published[size_t(r)]) std::memcpy(dst, g.published[size_t(r)], block);
    }
    g.sync.arrive_and_wait();
  }

  void do_reduce_scatter(void* out, const void* in, size_t count, DType dtype) override {
    Group& g = *group_;
    g.published[size_t(rank())] = in;
    g.sync.arrive_and_wait();
    std::vector<std::byte> result(count * dtype_size(dtype));
    sum_published_into(result.data(), g, size_t(rank()) * count, count, dtype);
    g.sync.arrive_and_wait();
    if (count) std::memcpy(out, result.data(), result.size());
  }

  void do_broadcast(void* data, size_t bytes, int root) override {
    Group& g = *group_;
    g.published[size_t(rank())] = data;
    g.sync.arrive_and_wait();
    if (rank() != root && bytes) std::memcpy(data, g.published[size_t(root)], bytes);
    g.sync.arrive_and_wait();
  }

  void do_barrier() override { group_->sync.arrive_and_wait(); }

  Request do_isend(const void* data, size_t bytes, int dest, int tag, std::string) override {
    const auto* p = static_cast<const std::byte*>(data);
    {
      std::lock_guard lock(group_->mail_mutex);
      group_->mail[{rank(), dest, tag}].emplace_back(p, p + bytes);
    }
    group_->mail_arrived.notify_all();
    return Request();
  }

  Request do_irecv(void* data, size_t bytes, int source, int tag, std::string what) override {
    return Request(std::make_unique<LocalRecv>(group_, std::make_tuple(source, rank(), tag), data, bytes, watchdog(),
                                               watchdog_slot(), std::move(what)));
  }

  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name) override {
    Group& g = *group_;
    g.split_in[size_t(rank())] = {color, key, world_rank()};
    g.sync.arrive_and_wait();
    // The members of my color, ordered by (key, rank here); the first of them makes the new group.
    std::vector<int> members;
    for (int r = 0; r < g.size; ++r)
      if (color >= 0 && g.split_in[size_t(r)].color == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return g.split_in[size_t(a)].key < g.split_in[size_t(b)].key; });
    if (!members.empty() && members.front() == rank()) {
      std::lock_guard lock(g.split_mutex);
      g.split_out[color] = std::make_shared<Group>(int(members.size()));
    }
    g.sync.arrive_and_wait();
    std::shared_ptr<Group> mine;
    if (color >= 0) {
      std::lock_guard lock(g.split_mutex);
      mine = g.split_out.at(color);
    }
    g.sync.arrive_and_wait();
    if (rank() == 0) {
      std::lock_guard lock(g.split_mutex);
      g.split_out.clear();
    }
    if (!mine) return nullptr;
    std::vector<int> world_ranks;
    int new_rank = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      world_ranks.push_back(g.split_in[size_t(members[i])].world_rank);
      if (members[i] == rank()) new_rank = int(i);
    }
    return std::make_unique<LocalCommunicator>(new_rank, std::move(world_ranks), name, std::move(mine), watchdog(),
                                               watchdog_slot());
  }

 private:
  std::shared_ptr<Group> group_;
};

}  // namespace

void run_local_ranks(int size, const std::function<void(Communicator& world)>& body, const CommOptions& options) {
  CHECK(size >= 1, "run_local_ranks with {} ranks", size);
  Watchdog watchdog(resolve_watchdog_timeout(options), abort_process);
  auto group = std::make_shared<Group>(size);
  std::vector<int> world_ranks(static_cast<size_t>(size));
  std::iota(world_ranks.begin(), world_ranks.end(), 0);
  std::vector<int> slots;
  for (int r = 0; r < size; ++r) slots.push_back(watchdog.add_slot(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      LocalCommunicator world(r, world_ranks, "world", group, &watchdog, slots[size_t(r)]);
      try {
        body(world);
      } catch (const std::exception& e) {
        world.abort(fmt::format("uncaught exception: {}", e.what()));
      }
    });
  for (auto& t : threads) t.join();
}

}  // namespace llamatrain::parallel
