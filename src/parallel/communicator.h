// Communicator: the collective and point-to-point operations the parallel runtime needs, over a
// group of ranks. Buffers are plain pointers and element counts, so a backend whose buffers live on
// a device (NCCL, one stream) fits the same interface (docs/parallel.md). Implementations:
// MpiCommunicator (mpi_communicator.h) and LocalCommunicator (local_communicator.h, ranks as threads).
//
// Rules every implementation keeps: every rank of a communicator calls its collectives in the same
// order with the same counts; reductions are sums; the public calls number each collective (#1, #2,
// ... per communicator, the same number on every rank) and register it with the watchdog for as long
// as it blocks. A failed operation, or a watchdog timeout, aborts every rank with a message naming
// the rank and the operation. Not here: reductions other than sum, bf16 reductions, device buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llamatrain::parallel {

class Watchdog;

enum class DType { f32, f64 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

inline constexpr double kDefaultWatchdogTimeoutS = 300;
// How long a rank may wait for another's known-long work done alone (rank 0 writing or verifying a
// checkpoint, building the sample indices): 4 hours, or $LLAMATRAIN_WATCHDOG_LONG_TIMEOUT seconds.
inline constexpr double kDefaultLongWaitTimeoutS = 4 * 3600;

// How a world communicator is set up.
struct CommOptions {
  // Seconds an operation may block before the watchdog aborts every rank; 0 disables it. Unset:
  // $LLAMATRAIN_WATCHDOG_TIMEOUT if set, else kDefaultWatchdogTimeoutS (5 minutes).
  std::optional<double> watchdog_timeout_s;
  // Largest buffer one MPI call moves per rank; larger operations are split into several calls
  // (MPI counts are `int`). Tests lower it to exercise the splitting.
  size_t max_message_bytes = size_t(1) << 30;
};

// The timeout CommOptions resolves to. Throws Error for an unreadable $LLAMATRAIN_WATCHDOG_TIMEOUT.
double resolve_watchdog_timeout(const CommOptions& options);
// $LLAMATRAIN_WATCHDOG_LONG_TIMEOUT, else kDefaultLongWaitTimeoutS. Throws Error when unreadable.
double resolve_long_wait_timeout();

// A pending non-blocking operation. wait() blocks until it completes (under the watchdog); the
// destructor waits for one that was never waited. Default-constructed: already complete.
class Request {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual void wait() = 0;
    virtual bool test() { return false; }  // done? never blocks (default: "not known yet")
  };
  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& other) noexcept;
  ~Request();

  void wait();
  // True when the operation has completed (the request is then complete, as after wait()); never
  // blocks. On transports that progress only inside their own calls (MPI), calling it lets an
  // operation in flight advance.
  bool test();
  bool pending() const { return impl_ != nullptr; }

 private:
  std::unique_ptr<Impl> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return int(world_ranks_.size()); }
  // This rank's rank in the world communicator, and every member's, in this communicator's order.
  int world_rank() const { return world_ranks_[size_t(rank_)]; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  const std::string& name() const { return name_; }  // "world", "tp", "dp", ...

  // data (count) on every rank becomes the elementwise sum over the ranks.
  void all_reduce(float* data, size_t count) { all_reduce(data, count, DType::f32); }
  void all_reduce(double* data, size_t count) { all_reduce(data, count, DType::f64); }
  // The same, started now and finished by the request's wait(); data must stay untouched until then.
  Request iall_reduce(float* data, size_t count) { return iall_reduce(data, count, DType::f32); }
  Request iall_reduce(double* data, size_t count) { return iall_reduce(data, count, DType::f64); }
  // out (size * count) = every rank's in (count), in rank order. In place: in == out + rank * count.
  void all_gather(float* out, const float* in, size_t count) { all_gather(out, in, count, DType::f32); }
  void all_gather(double* out, const double* in, size_t count) { all_gather(out, in, count, DType::f64); }
  // out (count) = sum over ranks of block `rank` of their in (size * count). In place:
  // out == in + rank * count (then the rest of `in` is left undefined).
  void reduce_scatter(float* out, const float* in, size_t count) { reduce_scatter(out, in, count, DType::f32); }
  void reduce_scatter(double* out, const double* in, size_t count) { reduce_scatter(out, in, count, DType::f64); }
  // data (bytes) on every rank becomes root's.
  void broadcast(void* data, size_t bytes, int root);
  // root's string on every rank (each rank passes its own; only root's is read).
  std::string broadcast_string(std::string s, int root);
  // Every rank's string, in rank order, on every rank.
  std::vector<std::string> gather_strings(const std::string& mine);
  void barrier();
  // Point to point, matched by (source, tag) in order of posting. A send's buffer must stay untouched
  // and a receive's unread until wait(); a receive must expect exactly the bytes sent.
  Request isend(const void* data, size_t bytes, int dest, int tag);
  Request irecv(void* data, size_t bytes, int source, int tag);
  // Collective: the ranks with the same color form a new communicator, ordered by (key, rank here).
  // color < 0: this rank joins none and gets nullptr.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name);
  // Prints "[rank R] abort: message" and brings every rank of the job down. Never returns.
  [[noreturn]] virtual void abort(const std::string& message) = 0;

  // The operation now blocking on this rank, as the watchdog and error messages name it.
  const std::string& current_operation() const { return current_op_; }

  // While a LongWait lives, this rank's collectives on this communicator may block up to
  // max(timeout_s, the watchdog's timeout): the rank waits there for another rank's known-long work
  // done alone; `why` ("rank 0 writing checkpoint step_100") joins the watchdog's message.
  class LongWait {
   public:
    LongWait(Communicator* comm, double timeout_s, std::string why);  // comm may be null: no effect
    ~LongWait();
    LongWait(const LongWait&) = delete;
    LongWait& operator=(const LongWait&) = delete;

   private:
    Communicator* comm_;
  };

 protected:
  Communicator(int rank, std::vector<int> world_ranks, std::string name, Watchdog* watchdog, int watchdog_slot);

  // Transport, called by the public functions above after checking arguments and registering the
  // operation; `dtype` tells the element type of typed buffers.
  virtual void do_all_reduce(void* data, size_t count, DType dtype) = 0;
  virtual Request do_iall_reduce(void* data, size_t count, DType dtype) = 0;
  virtual void do_all_gather(void* out, const void* in, size_t count, DType dtype) = 0;
  virtual void do_reduce_scatter(void* out, const void* in, size_t count, DType dtype) = 0;
  virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
  virtual void do_barrier() = 0;
  virtual Request do_isend(const void* data, size_t bytes, int dest, int tag, std::string what) = 0;
  virtual Request do_irecv(void* data, size_t bytes, int source, int tag, std::string what) = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name) = 0;

  Watchdog* watchdog() const { return watchdog_; }
  int watchdog_slot() const { return watchdog_slot_; }
  // "'dp' (world ranks 0,2,4,6)": how messages name this communicator.
  const std::string& description() const { return description_; }

 private:
  void all_reduce(void* data, size_t count, DType dtype);
  Request iall_reduce(void* data, size_t count, DType dtype);
  void all_gather(void* out, const void* in, size_t count, DType dtype);
  void reduce_scatter(void* out, const void* in, size_t count, DType dtype);
  std::string start_collective(const char* op, const std::string& detail);

  int rank_;
  std::vector<int> world_ranks_;
  std::string name_;
  std::string description_;
  Watchdog* watchdog_;
  int watchdog_slot_;
  uint64_t collectives_ = 0;  // collectives started on this communicator (the same on every rank)
  uint64_t sends_ = 0, recvs_ = 0;
  std::string current_op_;
  double long_wait_s_ = 0;  // a LongWait's allowance, 0 outside one
  std::string long_wait_why_;
};

}  // namespace llamatrain::parallel
