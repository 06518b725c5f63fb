// Internal to kernels/cpu: the last include of every file compiled once per CPU variant (the kernels
// of ops_list.inc and internal_list.inc; CMakeLists.txt lists the files). Such a file is compiled
// with LLAMATRAIN_CPU_VARIANT set to the variant's namespace (avx2, avx512; native or generic in a
// build with one variant) and defines its kernels in llamatrain::cpu::LLAMATRAIN_CPU_VARIANT.
// dispatch.cpp defines the llamatrain::cpu functions of ops.h, which call the variant chosen for this
// CPU at run time.
//
// The AVX-512 variant: the same compiler flags as the rest of the program (x86-64-v3: AVX2, FMA)
// plus LLAMATRAIN_CPU_AVX512, and from this header on a `#pragma GCC target` adds AVX-512 F, CD, BW,
// DQ and VL. The pragma applies only to functions defined after it: the headers included before
// this one (the standard library's, core/, the other kernels/cpu headers) keep the program's
// target, so an inline function or template they define compiles the same in every variant and the
// linker's pick of one copy can never hand AVX-512 code to another CPU (architecture.cpu_variants
// checks the binary). They still inline into the variant's functions and vectorize there at its
// width. Hence this header comes last, and nothing is included after it.
#pragma once

#ifndef LLAMATRAIN_CPU_VARIANT
#error "kernels/cpu/variant.h: compile this file as a CPU variant (LLAMATRAIN_CPU_VARIANT; see CMakeLists.txt)"
#endif

#include "core/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {
#include "kernels/cpu/ops_list.inc"
namespace detail {
#include "kernels/cpu/internal_list.inc"
}  // namespace detail
}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT

// Floats per vector register of the variant (kernels written on compiler vector extensions size
// their vectors by it: a vector wider than the registers lives on the stack).
#if defined(LLAMATRAIN_CPU_AVX512)
#if !defined(__GNUC__) || defined(__clang__)
#error "the AVX-512 CPU variant needs GCC's #pragma GCC target; configure with -DLLAMATRAIN_CPU_VARIANTS=native"
#endif
#pragma GCC target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl")
#define LLAMATRAIN_CPU_VECTOR_FLOATS 16
#elif defined(__AVX512F__)
#define LLAMATRAIN_CPU_VECTOR_FLOATS 16
#elif defined(__AVX__)
#define LLAMATRAIN_CPU_VECTOR_FLOATS 8
#else
#define LLAMATRAIN_CPU_VECTOR_FLOATS 4
#endif
