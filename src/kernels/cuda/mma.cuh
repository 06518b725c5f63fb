// Internal to kernels/cuda (device code): the warp-wide tensor-core instructions the flash attention
// kernels use, one small function each, so that every use has the fragment layout the PTX ISA gives
// it (sm_80 and later, so the H100/H200 too). Under the CUDA emulation (tools/cuda_emulator) each
// calls its twin in emu.h, which exchanges the fragments across the warp exactly as that layout
// says; a kernel written on these functions runs here and on the GPU alike.
//
// Lane l of a warp is in group g = l / 4, with index t = l % 4 in its group. A register holds two
// bf16, the lower column (or row) index in its low 16 bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/rng_device.cuh"

namespace llamatrain::cuda::detail {

// Two floats rounded to bf16 (to nearest even, as core/bf16.h) in one register: lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(rng::bf16_bits_rne(lo)) | (uint32_t(rng::bf16_bits_rne(hi)) << 16);
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 bf16 matrices from shared memory. Lanes 8j to
// 8j+7 give the addresses of rows 0 to 7 of matrix j (each 16-byte aligned); register j of lane l gets
// matrix j's row g, elements 2t and 2t+1. trans (ldmatrix ... .trans): elements (2t, g) and (2t+1, g)
// instead, matrix j transposed.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const uint16_t* row, bool trans) {
#ifdef LLAMATRAIN_CUDA_EMULATION
  emu::ldmatrix_x4(r, row, trans);
#else
  const unsigned address = unsigned(__cvta_generic_to_shared(row));
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#endif
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: c += a * b, a 16x16 and b 16x8 in bf16, c
// 16x8 in fp32. Fragments:
//   a[i]: row g + 8 * (i % 2), columns 2t + 8 * (i / 2) and the next (so a[0..3] is what
//         ldmatrix_x4 gives for the four 8x8 quarters in the order top-left, bottom-left,
//         top-right, bottom-right);
//   b[i]: column g, rows 2t + 8 * i and the next (what ldmatrix_x4 gives from rows of b's transpose);
//   c[i]: row g + 8 * (i / 2), column 2t + i % 2 (so two c's of adjacent 8-column blocks, packed, are
//         an a fragment: the FlashAttention-2 trick that keeps the probabilities in registers).
__device__ __forceinline__ void mma_bf16_16x8x16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef LLAMATRAIN_CUDA_EMULATION
  emu::mma_m16n8k16_bf16(c, a, b);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// cp.async.cg.shared.global [dst], [src], 16: 16 bytes from global to shared memory (both 16-byte
// aligned), in flight until a cp_async_wait lets them land. cp_async_commit closes this thread's
// group of copies issued since the last one; cp_async_wait<N> waits until at most N of its groups, the
// newest, are still in flight. The copies are the thread's own: other threads see them after a
// __syncthreads that follows the wait. (The emulation holds each copy back until the wait that must
// land it, so a kernel that reads a tile before its wait reads the old tile there too.)
__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
#ifdef LLAMATRAIN_CUDA_EMULATION
  emu::cp_async_16(dst, src);
#else
  const unsigned address = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(src) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifdef LLAMATRAIN_CUDA_EMULATION
  emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef LLAMATRAIN_CUDA_EMULATION
  emu::cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace llamatrain::cuda::detail
