// MpiCommunicator: one MPI communicator per object, sharing an MpiRuntime (watchdog, limits, who
// finalizes). Errors come back as return codes (MPI_ERRORS_RETURN on the world, inherited by every
// split) and each is turned into a message and MPI_Abort. Operations larger than
// max_message_bytes are split into several calls; all_gather moves one column of the (ranks, count)
// layout per call through a datatype resized to the row stride, reduce_scatter packs each column
// into a contiguous buffer first (OpenMPI refuses MPI_SUM on such a datatype).
#include "parallel/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "core/error.h"
#include "parallel/watchdog.h"

namespace llamatrain::parallel {
namespace {

// Prints the message and ends every rank. `may_call_mpi`: false from a thread that MPI's thread
// level does not allow to call it; then the process exits and the launcher ends the others.
[[noreturn]] void abort_job(const std::string& message, bool may_call_mpi) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  if (may_call_mpi) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, size_t(len));
}

MPI_Datatype mpi_type(DType t) { return t == DType::f32 ? MPI_FLOAT : MPI_DOUBLE; }

struct MpiRuntime {
  int world_rank = 0;
  bool finalize = false;         // MPI was initialized here
  bool thread_multiple = false;  // the watchdog thread may call MPI_Abort
  size_t max_message_bytes = 0;
  std::unique_ptr<Watchdog> watchdog;
  int slot = 0;

  ~MpiRuntime() {
    watchdog.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalize && !finalized) MPI_Finalize();
  }

  [[noreturn]] void fail(const char* call, int code, const std::string& operation) const {
    abort_job(fmt::format("[rank {}] {} failed in {}: {}", world_rank, call, operation, mpi_error_text(code)), true);
  }
  void check(int code, const char* call, const std::string& operation) const {
    if (code != MPI_SUCCESS) [[unlikely]]
      fail(call, code, operation);
  }
};

// `count` elements of `base`, with the extent of `stride` elements: one column of a (ranks, stride) layout.
class StridedBlock {
 public:
  StridedBlock(const MpiRuntime& rt, MPI_Datatype base, size_t count, size_t stride, const std::string& op) {
    MPI_Datatype contiguous;
    MPI_Aint lb = 0, extent = 0;
    rt.check(MPI_Type_get_extent(base, &lb, &extent), "MPI_Type_get_extent", op);
    rt.check(MPI_Type_contiguous(int(count), base, &contiguous), "MPI_Type_contiguous", op);
    rt.check(MPI_Type_create_resized(contiguous, 0, MPI_Aint(stride) * extent, &type_), "MPI_Type_create_resized", op);
    rt.check(MPI_Type_free(&contiguous), "MPI_Type_free", op);
    rt.check(MPI_Type_commit(&type_), "MPI_Type_commit", op);
  }
  ~StridedBlock() { MPI_Type_free(&type_); }
  StridedBlock(const StridedBlock&) = delete;
  StridedBlock& operator=(const StridedBlock&) = delete;
  MPI_Datatype type() const { return type_; }

 private:
  MPI_Datatype type_;
};

class MpiRequest : public Request::Impl {
 public:
  MpiRequest(std::shared_ptr<MpiRuntime> rt, std::vector<MPI_Request> requests, std::string what,
             std::optional<size_t> expect_bytes)
      : rt_(std::move(rt)), requests_(std::move(requests)), what_(std::move(what)), expect_bytes_(expect_bytes) {}

  bool test() override {
    if (expect_bytes_) return false;  // receives check their size in wait()
    int done = 0;
    rt_->check(MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall", what_);
    return done != 0;
  }

  // One MPI_Wait per request, never MPI_Waitall: under MPI_THREAD_MULTIPLE, OpenMPI 4.1's
  // MPI_Waitall given a request that has already failed (a receive truncated before the wait, its
  // message having arrived first) spins instead of returning the error: the job would end only at
  // the watchdog's timeout, without the error. MPI_Wait returns the error in either order.
  void wait() override {
    WatchdogScope scope(rt_->watchdog.get(), rt_->slot, "wait for " + what_);
    std::vector<MPI_Status> statuses(requests_.size());
    for (size_t i = 0; i < requests_.size(); ++i) rt_->check(MPI_Wait(&requests_[i], &statuses[i]), "MPI_Wait", what_);
    if (!expect_bytes_) return;
    size_t received = 0;
    for (const MPI_Status& s : statuses) {
      int n = 0;
      rt_->check(MPI_Get_count(&s, MPI_BYTE, &n), "MPI_Get_count", what_);
      received += size_t(n);
    }
    if (received != *expect_bytes_)
      abort_job(
          fmt::format("[rank {}] {}: received {} bytes, expected {}", rt_->world_rank, what_, received, *expect_bytes_),
          true);
  }

 private:
  std::shared_ptr<MpiRuntime> rt_;
  std::vector<MPI_Request> requests_;
  std::string what_;
  std::optional<size_t> expect_bytes_;  // receives: the bytes the message must hold
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, std::vector<int> world_ranks, std::string name,
                  std::shared_ptr<MpiRuntime> rt)
      : Communicator(rank, std::move(world_ranks), std::move(name), rt->watchdog.get(), rt->slot),
        comm_(comm),
        rt_(std::move(rt)) {}

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_WORLD && !finalized) rt_->check(MPI_Comm_free(&comm_), "MPI_Comm_free", description());
  }

  [[noreturn]] void abort(const std::string& message) override {
    abort_job(fmt::format("[rank {}] abort: {}", rt_->world_rank, message), true);
  }

 protected:
  // Elements per MPI call for a type of `esize` bytes (at least 1, at most INT_MAX).
  size_t chunk_elements(size_t esize) const {
    return std::clamp(rt_->max_message_bytes / esize, size_t(1), size_t(std::numeric_limits<int>::max()));
  }

  void do_all_reduce(void* data, size_t count, DType dtype) override {
    const size_t esize = dtype_size(dtype), chunk = chunk_elements(esize);
    for (size_t off = 0; off < count; off += chunk)
      rt_->check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + off * esize, int(std::min(chunk, count - off)),
                               mpi_type(dtype), MPI_SUM, comm_),
                 "MPI_Allreduce", current_operation());
  }

  Request do_iall_reduce(void* data, size_t count, DType dtype) override {
    const size_t esize = dtype_size(dtype), chunk = chunk_elements(esize);
    std::vector<MPI_Request> requests;
    for (size_t off = 0; off < count; off += chunk) {
      requests.emplace_back();
      rt_->check(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + off * esize, int(std::min(chunk, count - off)),
                                mpi_type(dtype), MPI_SUM, comm_, &requests.back()),
                 "MPI_Iallreduce", current_operation());
    }
    if (requests.empty()) return Request();
    return Request(std::make_unique<MpiRequest>(rt_, std::move(requests), current_operation(), std::nullopt));
  }

  void do_all_gather(void* out, const void* in, size_t count, DType dtype) override {
    const size_t esize = dtype_size(dtype), chunk = chunk_elements(esize);
    const bool in_place = in == static_cast<const char*>(out) + size_t(rank()) * count * esize;
    if (count == 0) return;
    if (count <= chunk) {
      rt_->check(MPI_Allgather(in_place ? MPI_IN_PLACE : in, int(count), mpi_type(dtype), out, int(count),
                               mpi_type(dtype), comm_),
                 "MPI_Allgather", current_operation());
      return;
    }
    for (size_t off = 0; off < count; off += chunk) {
      const size_t n = std::min(chunk, count - off);
      StridedBlock column(*rt_, mpi_type(dtype), n, count, current_operation());
      rt_->check(MPI_Allgather(in_place ? MPI_IN_PLACE : static_cast<const char*>(in) + off * esize, int(n),
                               mpi_type(dtype), static_cast<char*>(out) + off * esize, 1, column.type(), comm_),
                 "MPI_Allgather", current_operation());
    }
  }

  void do_reduce_scatter(void* out, const void* in, size_t count, DType dtype) override {
    const size_t esize = dtype_size(dtype), P = size_t(size());
    const char* src = static_cast<const char*>(in);
    char* dst = static_cast<char*>(out);
    if (count == 0) return;
    if (count <= chunk_elements(esize)) {
      // In place, MPI leaves the result at the start of the buffer; it is moved to this rank's block.
      const bool in_place = dst == src + size_t(rank()) * count * esize;
      char* buffer = const_cast<char*>(src);
      rt_->check(MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : src, in_place ? buffer : dst, int(count),
                                          mpi_type(dtype), MPI_SUM, comm_),
                 "MPI_Reduce_scatter_block", current_operation());
      if (in_place && rank() != 0) std::memcpy(dst, buffer, count * esize);
      return;
    }
    // Too large for one call: column by column, each column's P blocks packed into one contiguous
    // buffer of at most max_message_bytes (MPI's reductions take no strided datatypes).
    const size_t chunk = std::max<size_t>(1, std::min(rt_->max_message_bytes, size_t(64) << 20) / (P * esize));
    std::vector<char> packed(P * std::min(chunk, count) * esize);
    for (size_t off = 0; off < count; off += chunk) {
      const size_t n = std::min(chunk, count - off);
      for (size_t j = 0; j < P; ++j)
        std::memcpy(packed.data() + j * n * esize, src + (j * count + off) * esize, n * esize);
      rt_->check(MPI_Reduce_scatter_block(packed.data(), dst + off * esize, int(n), mpi_type(dtype), MPI_SUM, comm_),
                 "MPI_Reduce_scatter_block", current_operation());
    }
  }

  void do_broadcast(void* data, size_t bytes, int root) override {
    const size_t chunk = chunk_elements(1);
    for (size_t off = 0; off < bytes; off += chunk)
      rt_->check(MPI_Bcast(static_cast<char*>(data) + off, int(std::min(chunk, bytes - off)), MPI_BYTE, root, comm_),
                 "MPI_Bcast", current_operation());
  }

  void do_barrier() override { rt_->check(MPI_Barrier(comm_), "MPI_Barrier", current_operation()); }

  Request do_isend(const void* data, size_t bytes, int dest, int tag, std::string what) override {
    const size_t chunk = chunk_elements(1);
    std::vector<MPI_Request> requests;
    for (size_t off = 0; off < bytes || requests.empty(); off += chunk) {
      requests.emplace_back();
      rt_->check(MPI_Isend(static_cast<const char*>(data) + off, int(std::min(chunk, bytes - off)), MPI_BYTE, dest, tag,
                           comm_, &requests.back()),
                 "MPI_Isend", what);
    }
    return Request(std::make_unique<MpiRequest>(rt_, std::move(requests), std::move(what), std::nullopt));
  }

  Request do_irecv(void* data, size_t bytes, int source, int tag, std::string what) override {
    const size_t chunk = chunk_elements(1);
    std::vector<MPI_Request> requests;
    for (size_t off = 0; off < bytes || requests.empty(); off += chunk) {
      requests.emplace_back();
      rt_->check(MPI_Irecv(static_cast<char*>(data) + off, int(std::min(chunk, bytes - off)), MPI_BYTE, source, tag,
                           comm_, &requests.back()),
                 "MPI_Irecv", what);
    }
    return Request(std::make_unique<MpiRequest>(rt_, std::move(requests), std::move(what), bytes));
  }

  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name) override {
    const std::string& op = current_operation();
    MPI_Comm comm = MPI_COMM_NULL;
    rt_->check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &comm), "MPI_Comm_split", op);
    if (comm == MPI_COMM_NULL) return nullptr;
    int rank = 0, size = 0;
    rt_->check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", op);
    rt_->check(MPI_Comm_size(comm, &size), "MPI_Comm_size", op);
    // The members' world ranks, in the new communicator's order.
    MPI_Group group, world_group;
    rt_->check(MPI_Comm_group(comm, &group), "MPI_Comm_group", op);
    rt_->check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group", op);
    std::vector<int> ranks(size_t(size), 0), world_ranks(size_t(size), 0);
    for (int i = 0; i < size; ++i) ranks[size_t(i)] = i;
    rt_->check(MPI_Group_translate_ranks(group, size, ranks.data(), world_group, world_ranks.data()),
               "MPI_Group_translate_ranks", op);
    rt_->check(MPI_Group_free(&group), "MPI_Group_free", op);
    rt_->check(MPI_Group_free(&world_group), "MPI_Group_free", op);
    return std::make_unique<MpiCommunicator>(comm, rank, std::move(world_ranks), name, rt_);
  }

 private:
  MPI_Comm comm_;
  std::shared_ptr<MpiRuntime> rt_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world(const CommOptions& options) {
  static std::atomic<bool> made{false};
  CHECK(!made.exchange(true), "make_mpi_world called twice in one process (MPI cannot be initialized twice)");
  const double timeout_s = resolve_watchdog_timeout(options);
  CHECK(options.max_message_bytes >= 1);

  auto rt = std::make_shared<MpiRuntime>();
  int initialized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // A plain program (no mpirun / srun): OpenMPI's singleton without its helper daemon. Ignored
    // under a launcher; a value the user set wins.
    ::setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      abort_job("[rank ?] MPI_Init_thread failed", false);
    rt->finalize = true;
  } else {
    MPI_Query_thread(&provided);
  }
  const std::string op = "make_mpi_world";
  rt->check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", op);
  int rank = 0, size = 0;
  rt->check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank", op);
  rt->check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size", op);
  rt->world_rank = rank;
  rt->thread_multiple = provided >= MPI_THREAD_MULTIPLE;
  rt->max_message_bytes = options.max_message_bytes;
  const bool may_call_mpi = rt->thread_multiple;
  rt->watchdog = std::make_unique<Watchdog>(
      timeout_s, [may_call_mpi](const std::string& message) { abort_job(message, may_call_mpi); });
  rt->slot = rt->watchdog->add_slot(rank);
  check_rank() = rank;
  // A CHECK failure on any rank ends the whole job, not just this process (srun without
  // --kill-on-bad-exit would otherwise leave the others waiting for the watchdog).
  if (size > 1) check_abort_hook() = [] { MPI_Abort(MPI_COMM_WORLD, 134); };

  std::vector<int> world_ranks(size_t(size), 0);
  for (int i = 0; i < size; ++i) world_ranks[size_t(i)] = i;
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, rank, std::move(world_ranks), "world", std::move(rt));
}

}  // namespace llamatrain::parallel
