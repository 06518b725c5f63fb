// Storage for the big flat arenas (parameters, gradients, optimizer state, activations, kernel
// scratch). ArenaVector<T> is a std::vector whose blocks of 2 MiB or more are 2 MiB-aligned and
// marked MADV_HUGEPAGE, so with Linux transparent huge pages in "madvise" mode (Debian's default)
// they are backed by 2 MiB pages: far fewer TLB misses when GEMMs and optimizer loops stream
// through hundreds of MB, and 512x fewer page faults on first touch. Smaller blocks and other
// systems get plain aligned allocations; huge pages are a hint, never required.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace llamatrain {

void* arena_allocate(size_t bytes);  // throws std::bad_alloc
void arena_free(void* p, size_t bytes) noexcept;

template <typename T>
struct ArenaAllocator {
  using value_type = T;
  ArenaAllocator() noexcept = default;
  template <typename U>
  ArenaAllocator(const ArenaAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(arena_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { arena_free(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const ArenaAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T>
using ArenaVector = std::vector<T, ArenaAllocator<T>>;

}  // namespace llamatrain
