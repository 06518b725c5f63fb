#!/usr/bin/env bash
# Runs tests/kernels/cuda_vs_cpu_test.cpp on the CPU emulation of CUDA (emu.h): the .cu files are
# rewritten as C++ (to_host.py), compiled with g++ together with kernels/cuda/matmul.cpp, the
# emulator's runtime and gemm (emu_runtime.cpp) and the test, and linked with the release build's
# core, kernels/ref and kernels/cpu libraries. A check of the kernels' logic for machines without a
# GPU, not a substitute for running the test on one; slow (minutes: every block's threads are real
# threads), so not part of ctest. The lm head runs with 64 KiB chunks of logits, so its small cases
# cross chunks too. With --model, the whole model instead: tests/model/backend_test.cpp's CUDA cases
# (the CUDA backend, model/kernels_cuda.cpp, against the reference backend on every golden config),
# linked with the release build's io, model, parallel and data libraries too (about 10 minutes).
# Usage: bash tools/cuda_emulator/run.sh [--build DIR] [--model] [gtest flags, e.g. --gtest_filter=CudaVsRef.Attention]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
if [ "${1:-}" = --build ]; then build=$2; shift 2; fi
model=0
if [ "${1:-}" = --model ]; then model=1; shift; fi
for lib in core kernels_ref kernels_cpu io model parallel data; do
  [ -f "$build/libllamatrain_$lib.a" ] || { echo "run.sh: no $build/libllamatrain_$lib.a; hint: ninja -C $build llamatrain_$lib" >&2; exit 2; }
done
out=$build/cuda_emulator
mkdir -p "$out"
cuda_include=/usr/local/cuda/include
[ -f "$cuda_include/cuda_runtime.h" ] || { echo "run.sh: needs the CUDA headers in $cuda_include (dim3, cudaError_t)" >&2; exit 2; }
flags=(-std=c++20 -O2 -fopenmp -ffp-contract=off -w -Isrc -Itests -I"$cuda_include" -Itools/cuda_emulator
       -DLLAMATRAIN_SOURCE_DIR="\"$PWD\"" -DLLAMATRAIN_BINARY_DIR="\"$PWD/$build\"" -DSYSTEM_PYTHON="\"/usr/bin/python3\"")
test=tests/kernels/cuda_vs_cpu_test.cpp
[ $model = 1 ] && test=tests/model/backend_test.cpp
sources=(src/kernels/cuda/matmul.cpp tools/cuda_emulator/emu_runtime.cpp "$test")
for cu in src/kernels/cuda/*.cu; do
  cpp=$out/$(basename "$cu" .cu).cpp
  python3 tools/cuda_emulator/to_host.py "$cu" "$cpp" --lmhead-chunk-bytes 65536
  sources+=("$cpp")
done
objects=()
pids=()
for src in "${sources[@]}"; do
  obj=$out/$(basename "$src" .cpp).o
  g++ "${flags[@]}" -c "$src" -o "$obj" & pids+=($!)
  objects+=("$obj")
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
if [ $model = 1 ]; then
  # The model's layers (their kernels_cuda replaced by the emulated objects) and their libraries.
  g++ -fopenmp "${objects[@]}" "$build/libllamatrain_io.a" "$build/libllamatrain_model.a" \
    "$build/libllamatrain_parallel.a" "$build/libllamatrain_data.a" "$build/libllamatrain_kernels_cpu.a" \
    "$build/libllamatrain_kernels_ref.a" "$build/libllamatrain_core.a" -ldnnl -lfmt -lgtest -lgtest_main -lpthread \
    -lsentencepiece -lsentencepiece_train -lsimdjson -lz -lzstd $(pkg-config --libs ompi-c) \
    -o "$out/backend_test_emulated"
  case " $* " in
    *" --gtest_filter="*) ;;
    *) set -- "$@" --gtest_filter='*Cuda*' ;;
  esac
  OMP_NUM_THREADS=1 exec "$out/backend_test_emulated" "$@"
fi
g++ -fopenmp "${objects[@]}" "$build/libllamatrain_kernels_cpu.a" "$build/libllamatrain_kernels_ref.a" \
  "$build/libllamatrain_core.a" -ldnnl -lfmt -lgtest -lgtest_main -lpthread -o "$out/cuda_vs_cpu_test_emulated"
# Without a filter: all but the case of 1500 x 50000 logits (hours of the emulator's plain gemm; the
# small lm head cases cross chunks here).
case " $* " in
  *" --gtest_filter="*) ;;
  *) set -- "$@" --gtest_filter=-CudaVsCpu.LmHeadCeOverSeveralChunks ;;
esac
OMP_NUM_THREADS=1 exec "$out/cuda_vs_cpu_test_emulated" "$@"
