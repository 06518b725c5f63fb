// The model's kernels behind one seam: the passes (passes.cpp), the optimizer and decoding call an
// ops table, Kernels, chosen once per model by its Device, and never a backend's functions directly.
//   - cpu:  kernels/cpu (oneDNN matmuls, OpenMP), the default and the fast one here;
//   - ref:  kernels/ref, the plain single-threaded oracle: the whole model runs on it, so a test
//           compares every pass of the fast backend with the oracle's (tests/model/backend_test.cpp);
//   - cuda: kernels/cuda on an NVIDIA GPU, where the toolkit was found at build time.
// A backend owns the memory its kernels read (Buffer), the matmul copy of the weights the precision
// needs, and the form matmul-only activations are kept in (OperandForm): what is the CPU's choice of
// form (bf16, or bf16 values held in floats where oneDNN's fp32 kernel is the faster) lives inside
// the CPU backend. The ops keep kernels/ref/ops.h's names, argument order and accumulation rules
// (weight gradients +=, input gradients =, rmsnorm_backward's dx +=).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "core/bf16.h"
#include "core/rope.h"
#include "model/modes.h"

namespace llamatrain::model {

enum class Device { cpu, ref, cuda };
Device parse_device(const std::string& name);  // "cpu" | "ref" | "cuda" (or "gpu"); throws Error
const char* device_name(Device d);
// Whether a model can run on d in this process; when not, why (the plain cause and its fix).
bool device_usable(Device d, std::string* why = nullptr);
// A device as users name it (`what` names the option or key for errors): cpu, ref, cuda or gpu, or
// auto (cuda where usable, else cpu). A named device that is not usable here is an Error that says
// why.
Device choose_device(const std::string& name, const std::string& what);

// The storage of matmul-only activations (norm and SwiGLU outputs, the gate|up gradient) and of the
// weights' matmul copy: fp32 values, bf16, or bf16 values held in floats.
enum class OperandForm { f32, bf16, bf16_in_f32 };
size_t operand_bytes(OperandForm f);

// An activation in the backend's operand form (opaque to the passes).
struct Operand {
  void* p = nullptr;
};

// A matmul's input or output gradient: fp32 values, an Operand, or floats that a kernel called with
// for_matmul (rope_backward) left as the operand form's values for this matmul to read.
struct MatIn {
  enum class Kind { f32, operand, prepared };
  MatIn(const float* x) : p(x), kind(Kind::f32) {}   // NOLINT: a float array is a matmul input
  MatIn(Operand o) : p(o.p), kind(Kind::operand) {}  // NOLINT: so is an operand
  static MatIn prepared(const float* x) {
    MatIn m(x);
    m.kind = Kind::prepared;
    return m;
  }
  const void* p;
  Kind kind;
};

class Kernels {
 public:
  explicit Kernels(Precision p) : precision_(p) {}
  virtual ~Kernels() = default;
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  virtual Device device() const = 0;
  Precision precision() const { return precision_; }
  // Waits for the work queued so far (a device that runs the kernels asynchronously).
  virtual void synchronize() {}
  // Whether Buffer memory is host memory (the communicators, checkpoints and io read it directly).
  virtual bool host_memory() const = 0;

  // ---- memory ----
  virtual void* allocate(size_t bytes) = 0;  // throws std::bad_alloc or Error
  virtual void release(void* p, size_t bytes) noexcept = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // both in the backend's memory
  virtual void copy_to_host(void* host, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host, size_t bytes) = 0;
  // Token ids (host) for the kernels: the host array itself where the kernels read host memory, else
  // a copy in `staging` (n ints, the backend's memory).
  virtual const int32_t* input_ids(int32_t* staging, const int32_t* host, int64_t n) = 0;

  // ---- host access in bounded pieces ----
  // The n elements at p (the backend's memory) as host memory, piece by piece, in order: on a backend
  // of host memory one piece, the memory itself; on a device, copies of at most host_piece_bytes()
  // through one staging buffer (a device's arenas may be larger than the host's memory). read: `use`
  // gets each piece (host, first element, count). write: `fill` must write every element of each
  // piece, which is then copied over.
  template <typename T, typename F>
  void read_elements(const T* p, int64_t n, F&& use) {
    read_pieces(p, size_t(n) * sizeof(T), sizeof(T), [&](const void* h, size_t off, size_t bytes) {
      use(static_cast<const T*>(h), int64_t(off / sizeof(T)), int64_t(bytes / sizeof(T)));
    });
  }
  template <typename T, typename F>
  void write_elements(T* p, int64_t n, F&& fill) {
    write_pieces(p, size_t(n) * sizeof(T), sizeof(T), [&](void* h, size_t off, size_t bytes) {
      fill(static_cast<T*>(h), int64_t(off / sizeof(T)), int64_t(bytes / sizeof(T)));
    });
  }
  // One value of the backend's memory, read or written through a host copy.
  template <typename T>
  T get(const T* p) {
    T v;
    copy_to_host(&v, p, sizeof(T));
    return v;
  }
  template <typename T>
  void set(T* p, T v) {
    copy_from_host(p, &v, sizeof(T));
  }
  // The most bytes a device's piece holds: 64 MiB, or LLAMATRAIN_HOST_PIECE_BYTES (tests make it
  // small, so that tiny models cross pieces too).
  static size_t host_piece_bytes();

  // ---- operand form and the weights' matmul copy ----
  // The form this backend would keep operands in for an (M, N, K) gemm (M tokens, K inputs, N outputs
  // of the model's widest matmul) in this precision; fp32 is always OperandForm::f32.
  virtual OperandForm preferred_operand_form(int M, int N, int K) = 0;
  // Switches the form (before activations are laid out); the weights' copy follows.
  virtual void use_operand_form(OperandForm f) = 0;
  OperandForm operand_form() const { return form_; }
  size_t operand_bytes() const { return model::operand_bytes(form_); }
  // The parameter arena the matmul weights point into: n fp32 values (the master in fp32 and
  // bf16-mixed, the compute copy in bf16-sr) and, in bf16-sr (only), the bf16 master. Rebound
  // whenever the arena moves; the copy is re-derived (weights_bound).
  void bind_weights(float* f32, bf16* master, int64_t n);
  // After the arena's fp32 values were written (init, load): bf16-mixed re-derives its matmul copy;
  // bf16-sr rounds them to its bf16 master (nearest even) and sets them to the master's values.
  virtual void weights_changed() = 0;
  virtual int64_t weight_copy_bytes() const = 0;  // the matmul copy this backend holds itself

  // ---- forward / backward ops (ref::'s semantics; weights are pointers into the bound arena) ----
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C) = 0;
  virtual void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C) = 0;
  virtual void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                                int64_t vocab_begin, int V, int N, int C) = 0;
  virtual void vocab_parallel_embedding_backward(float* dwte, const float* dout, const int32_t* tokens,
                                                 int64_t vocab_begin, int V, int N, int C) = 0;
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int N, int C,
                               float eps) = 0;
  virtual void rmsnorm_forward(Operand out, float* rstd, const float* x, const float* weight, int N, int C,
                               float eps) = 0;
  // dweight may be nullptr (a frozen weight).
  virtual void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                                const float* rstd, int N, int C) = 0;
  virtual void matmul_forward(float* out, MatIn inp, const float* weight, int N, int IC, int OC) = 0;
  // dinp or dweight may be nullptr (skipped).
  virtual void matmul_backward(float* dinp, float* dweight, MatIn dout, MatIn inp, const float* weight, int N, int IC,
                               int OC) = 0;
  // rope: the inverse frequencies (core/rope.h: theta, and llama3 scaling).
  virtual void rope_forward(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D,
                            const RopeFreqs& rope) = 0;
  // for_matmul: dx's only use is the next matmul, which reads it as MatIn::prepared(dx).
  virtual void rope_backward(float* dx, const int32_t* pos, int N, int n_heads, int row_stride, int D,
                             const RopeFreqs& rope, bool for_matmul) = 0;
  // window: 0 causal; > 0 a sliding window (key u visible to query t iff t - window < u <= t).
  // doc_start (B, T) in the backend's memory, or nullptr: packed documents, key u visible to query t
  // only if doc_start[b, t] <= u (ref::attention_forward states the layout).
  virtual void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D,
                                 int window, const int32_t* doc_start) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                  int B, int T, int H, int Hkv, int D, int window, const int32_t* doc_start) = 0;
  virtual void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H,
                                int Hkv, int D, int window) = 0;
  // A linear layer's bias (q/k/v): x (N, OC) += bias per row; dbias (OC) += the column sums of dout.
  virtual void bias_forward(float* x, const float* bias, int N, int OC) = 0;
  virtual void bias_backward(float* dbias, const float* dout, int N, int OC) = 0;
  virtual void swiglu_forward(float* out, const float* h13, int N, int F) = 0;
  virtual void swiglu_forward(Operand out, const float* h13, int N, int F) = 0;
  virtual void swiglu_backward(Operand dh13, const float* dout, const float* h13, int N, int F) = 0;
  virtual void residual_forward(float* out, const float* a, const float* b, int64_t n) = 0;
  // resid = a + b (N rows of C), then normed = rmsnorm(resid): a backend may do both in one pass.
  virtual void residual_rmsnorm_forward(float* resid, Operand normed, float* rstd, const float* a, const float* b,
                                        const float* weight, int N, int C, float eps) {
    residual_forward(resid, a, b, int64_t(N) * C);
    rmsnorm_forward(normed, rstd, resid, weight, N, C, eps);
  }
  // The lm head and cross-entropy fused (V real rows of wout; dwout may be nullptr).
  virtual void lmhead_ce_forward(float* losses, const float* x, const float* wout, const int32_t* targets, int N, int C,
                                 int V) = 0;
  virtual void lmhead_ce_backward(float* losses, float* dx, float* dwout, const float* x, const float* wout,
                                  const int32_t* targets, float dloss, int N, int C, int V) = 0;
  virtual void vocab_parallel_ce_max(float* local_max, const float* logits, int N, int V) = 0;
  virtual void vocab_parallel_ce_partials(float* partials, float* global_max, float* logits, const float* maxima, int P,
                                          const int32_t* targets, int64_t vocab_begin, int N, int V) = 0;
  virtual void vocab_parallel_ce_forward(float* losses, const float* global_max, const float* partials,
                                         const int32_t* targets, int N) = 0;
  // dlogits in place of the exponentials; in the bf16 modes rounded to the matmul's operand values.
  virtual void vocab_parallel_ce_backward(float* exps, const float* partials, const int32_t* targets,
                                          int64_t vocab_begin, float dloss, int N, int V) = 0;

  // ---- optimizer, reductions, init ----
  virtual void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
                            float beta2, float eps, float weight_decay, int step, float grad_scale) = 0;
  // bf16-mixed (ref::adamw_update_bf16_copy): adamw_update, and the backend's matmul copy of param's
  // elements (its param_bf16) in the same pass.
  virtual void adamw_update_bf16_copy(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
                                      float beta1, float beta2, float eps, float weight_decay, int step,
                                      float grad_scale) = 0;
  // bf16-sr (ref::adamw_update_bf16_sr): param_f32 is the compute copy of the bf16 master's elements.
  virtual void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n,
                                    float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                                    float grad_scale, uint64_t seed, uint32_t tensor_id, uint64_t first_element) = 0;
  virtual double sum_squares(const float* x, int64_t n) = 0;  // in fp64, to the host
  virtual double sum(const float* x, int64_t n) = 0;          // in fp64, to the host
  virtual void fill_constant(float* out, int64_t n, float value) = 0;
  virtual void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first) = 0;

 protected:
  using PieceReader = std::function<void(const void* host, size_t offset, size_t bytes)>;
  using PieceWriter = std::function<void(void* host, size_t offset, size_t bytes)>;
  void read_pieces(const void* p, size_t bytes, size_t element, const PieceReader& use);
  void write_pieces(void* p, size_t bytes, size_t element, const PieceWriter& fill);
  // After bind_weights: the backend sizes its matmul copy and derives it.
  virtual void weights_bound() = 0;
  // The element of the bound arena a weight pointer starts at (checked to lie in it).
  int64_t weight_offset(const float* param) const;

  Precision precision_;
  OperandForm form_ = OperandForm::f32;
  float* f32_ = nullptr;    // the bound arena
  bf16* master_ = nullptr;  // bf16-sr's master
  int64_t n_ = 0;
};

// The backend of a device for a model of precision p; a plain error naming the cause when the device
// is not usable here (cuda: not built with CUDA, no driver, no GPU).
std::unique_ptr<Kernels> make_kernels(Device d, Precision p);

// An array in a backend's memory: allocated, zeroed, resized and freed through its Kernels.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(Kernels* k) : k_(k) {}
  Buffer(Buffer&& o) noexcept : k_(o.k_), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      clear();
      k_ = o.k_;
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~Buffer() { clear(); }
  void bind(Kernels* k) { k_ = k; }
  // n elements, all zero bits (what was there is freed).
  void assign_zero(int64_t n) {
    clear();
    if (n <= 0) return;
    p_ = static_cast<T*>(k_->allocate(size_t(n) * sizeof(T)));
    n_ = size_t(n);
    k_->zero(p_, n_ * sizeof(T));
  }
  // n elements: the first min(n, size()) kept, the rest zero.
  void resize(int64_t n) {
    if (size_t(n) == n_) return;
    Buffer b(k_);
    b.assign_zero(n);
    if (n_ > 0 && n > 0) k_->copy(b.p_, p_, std::min(n_, size_t(n)) * sizeof(T));
    *this = std::move(b);
  }
  void clear() {
    if (p_) k_->release(p_, n_ * sizeof(T));
    p_ = nullptr;
    n_ = 0;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  Kernels* k_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace llamatrain::model
