// Communicator: argument checks, operation numbering and watchdog registration shared by every
// transport; the transports implement the do_* functions.
#include "parallel/communicator.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

#include "core/error.h"
#include "parallel/watchdog.h"

namespace llamatrain::parallel {

size_t dtype_size(DType t) { return t == DType::f32 ? sizeof(float) : sizeof(double); }
const char* dtype_name(DType t) { return t == DType::f32 ? "f32" : "f64"; }

double resolve_watchdog_timeout(const CommOptions& options) {
  if (options.watchdog_timeout_s) return *options.watchdog_timeout_s;
  const char* env = std::getenv("LLAMATRAIN_WATCHDOG_TIMEOUT");
  if (!env || !*env) return kDefaultWatchdogTimeoutS;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(env, &end);
  if (errno != 0 || end == env || *end != '\0' || !(v >= 0) || v > 1e9)
    fail("LLAMATRAIN_WATCHDOG_TIMEOUT: got '{}', expected a number of seconds >= 0\nhint: the communication "
         "watchdog aborts the job when an operation blocks longer than this; 0 disables it, the default is {:g}",
         env, kDefaultWatchdogTimeoutS);
  return v;
}

double resolve_long_wait_timeout() {
  const char* env = std::getenv("LLAMATRAIN_WATCHDOG_LONG_TIMEOUT");
  if (!env || !*env) return kDefaultLongWaitTimeoutS;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(env, &end);
  if (errno != 0 || end == env || *end != '\0' || !(v > 0) || v > 1e9)
    fail("LLAMATRAIN_WATCHDOG_LONG_TIMEOUT: got '{}', expected a number of seconds > 0\nhint: how long a rank may "
         "wait while rank 0 writes or verifies a checkpoint alone; the default is {:g}",
         env, kDefaultLongWaitTimeoutS);
  return v;
}

Communicator::LongWait::LongWait(Communicator* comm, double timeout_s, std::string why) : comm_(comm) {
  if (!comm_) return;
  CHECK(comm_->long_wait_s_ == 0, "nested long waits on {}", comm_->description_);
  comm_->long_wait_s_ = timeout_s;
  comm_->long_wait_why_ = std::move(why);
}

Communicator::LongWait::~LongWait() {
  if (!comm_) return;
  comm_->long_wait_s_ = 0;
  comm_->long_wait_why_.clear();
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->wait();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Request::~Request() {
  if (impl_) impl_->wait();
}

void Request::wait() {
  if (!impl_) return;
  impl_->wait();
  impl_.reset();
}

bool Request::test() {
  if (!impl_) return true;
  if (!impl_->test()) return false;
  impl_.reset();
  return true;
}

namespace {

std::string describe_members(const std::string& name, const std::vector<int>& world_ranks) {
  constexpr size_t kShown = 16;
  std::string list;
  for (size_t i = 0; i < world_ranks.size() && i < kShown; ++i) {
    if (i) list += ',';
    list += std::to_string(world_ranks[i]);
  }
  if (world_ranks.size() > kShown) list += fmt::format(",... ({} ranks)", world_ranks.size());
  return fmt::format("'{}' (world ranks {})", name, list);
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

Communicator::Communicator(int rank, std::vector<int> world_ranks, std::string name, Watchdog* watchdog,
                           int watchdog_slot)
    : rank_(rank),
      world_ranks_(std::move(world_ranks)),
      name_(std::move(name)),
      description_(describe_members(name_, world_ranks_)),
      watchdog_(watchdog),
      watchdog_slot_(watchdog_slot) {
  CHECK(rank_ >= 0 && size_t(rank_) < world_ranks_.size(), "rank {} of a communicator of {}", rank_,
        world_ranks_.size());
  CHECK(watchdog_ != nullptr);
}

std::string Communicator::start_collective(const char* op, const std::string& detail) {
  current_op_ = fmt::format("{} #{} on {}, {}{}", op, ++collectives_, description_, detail,
                            long_wait_s_ > 0 ? " (waiting for " + long_wait_why_ + ")" : "");
  return current_op_;
}

void Communicator::all_reduce(void* data, size_t count, DType dtype) {
  CHECK(data || count == 0, "all_reduce of {} elements from a null buffer", count);
  WatchdogScope wait(watchdog_, watchdog_slot_, long_wait_s_,
                     start_collective("all_reduce", fmt::format("{} x {}", count, dtype_name(dtype))));
  do_all_reduce(data, count, dtype);
}

Request Communicator::iall_reduce(void* data, size_t count, DType dtype) {
  CHECK(data || count == 0, "iall_reduce of {} elements from a null buffer", count);
  start_collective("iall_reduce", fmt::format("{} x {}", count, dtype_name(dtype)));
  return do_iall_reduce(data, count, dtype);
}

void Communicator::all_gather(void* out, const void* in, size_t count, DType dtype) {
  const size_t block = count * dtype_size(dtype);
  CHECK((out && in) || count == 0, "all_gather of {} elements with a null buffer", count);
  const bool in_place = in == static_cast<const char*>(out) + size_t(rank_) * block;
  CHECK(in_place || !overlaps(out, block * size_t(size()), in, block),
        "all_gather: the input overlaps the output without being this rank's block (rank {}, {} elements)", rank_,
        count);
  WatchdogScope wait(watchdog_, watchdog_slot_, long_wait_s_,
                     start_collective("all_gather", fmt::format("{} x {} per rank", count, dtype_name(dtype))));
  do_all_gather(out, in, count, dtype);
}

void Communicator::reduce_scatter(void* out, const void* in, size_t count, DType dtype) {
  const size_t block = count * dtype_size(dtype);
  CHECK((out && in) || count == 0, "reduce_scatter of {} elements with a null buffer", count);
  const bool in_place = out == static_cast<const char*>(in) + size_t(rank_) * block;
  CHECK(in_place || !overlaps(out, block, in, block * size_t(size())),
        "reduce_scatter: the output overlaps the input without being this rank's block (rank {}, {} elements)", rank_,
        count);
  WatchdogScope wait(watchdog_, watchdog_slot_, long_wait_s_,
                     start_collective("reduce_scatter", fmt::format("{} x {} per rank", count, dtype_name(dtype))));
  do_reduce_scatter(out, in, count, dtype);
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  CHECK(data || bytes == 0, "broadcast of {} bytes from a null buffer", bytes);
  CHECK(root >= 0 && root < size(), "broadcast from root {} in a communicator of {}", root, size());
  WatchdogScope wait(watchdog_, watchdog_slot_, long_wait_s_,
                     start_collective("broadcast", fmt::format("{} bytes from rank {}", bytes, root)));
  do_broadcast(data, bytes, root);
}

std::string Communicator::broadcast_string(std::string s, int root) {
  if (size() == 1) return s;
  uint64_t n = s.size();
  broadcast(&n, sizeof n, root);
  s.resize(size_t(n));
  if (n > 0) broadcast(s.data(), size_t(n), root);
  return s;
}

std::vector<std::string> Communicator::gather_strings(const std::string& mine) {
  std::vector<std::string> all;
  all.reserve(size_t(size()));
  for (int r = 0; r < size(); r++) all.push_back(broadcast_string(mine, r));
  return all;
}

void Communicator::barrier() {
  WatchdogScope wait(watchdog_, watchdog_slot_, long_wait_s_, start_collective("barrier", "no data"));
  do_barrier();
}

Request Communicator::isend(const void* data, size_t bytes, int dest, int tag) {
  CHECK(data || bytes == 0, "isend of {} bytes from a null buffer", bytes);
  CHECK(dest >= 0 && dest < size() && dest != rank_, "isend from rank {} to rank {} in a communicator of {}", rank_,
        dest, size());
  CHECK(tag >= 0 && tag <= 32767, "isend tag {}, expected 0..32767", tag);
  current_op_ = fmt::format("isend #{} on {}, {} bytes to rank {} tag {}", ++sends_, description_, bytes, dest, tag);
  return do_isend(data, bytes, dest, tag, current_op_);
}

Request Communicator::irecv(void* data, size_t bytes, int source, int tag) {
  CHECK(data || bytes == 0, "irecv of {} bytes into a null buffer", bytes);
  CHECK(source >= 0 && source < size() && source != rank_, "irecv on rank {} from rank {} in a communicator of {}",
        rank_, source, size());
  CHECK(tag >= 0 && tag <= 32767, "irecv tag {}, expected 0..32767", tag);
  current_op_ =
      fmt::format("irecv #{} on {}, {} bytes from rank {} tag {}", ++recvs_, description_, bytes, source, tag);
  return do_irecv(data, bytes, source, tag, current_op_);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  WatchdogScope wait(watchdog_, watchdog_slot_, long_wait_s_,
                     start_collective("split", fmt::format("color {} key {} into '{}'", color, key, name)));
  return do_split(color < 0 ? -1 : color, key, name);
}

}  // namespace llamatrain::parallel
