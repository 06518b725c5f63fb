// ArenaAllocator's blocks: >= 2 MiB ones are 2 MiB-aligned and madvise(MADV_HUGEPAGE)d (see arena.h).
#include "core/arena.h"

#include <sys/mman.h>

#include <cstdlib>

namespace llamatrain {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kAlign = 64;  // a cache line: every arena is at least AVX-512-aligned
}  // namespace

void* arena_allocate(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const bool huge = bytes >= kHugePage;
  const size_t align = huge ? kHugePage : kAlign;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (huge) madvise(p, (bytes + align - 1) / align * align, MADV_HUGEPAGE);  // a hint: failure is fine
#endif
  return p;
}

void arena_free(void* p, size_t) noexcept { std::free(p); }

}  // namespace llamatrain
