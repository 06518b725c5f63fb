// CRC32C on the CPU's instruction; see crc32c.h. Eight bytes per instruction on the bulk, bytes at
// the ends. A CPU without the instruction (x86-64 older than SSE4.2, 2008) is refused with a plain
// error rather than computed slowly.
#include "core/crc32c.h"

#include <cstring>

#include "core/error.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#elif defined(__aarch64__)
#include <arm_acle.h>
#endif

namespace llamatrain {

#if defined(__x86_64__)

namespace {

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

}  // namespace

bool crc32c_supported() {
  static const bool ok = __builtin_cpu_supports("sse4.2");
  return ok;
}

uint32_t crc32c(const void* data, size_t n, uint32_t previous) {
  if (!crc32c_supported()) fail("this CPU has no SSE4.2 crc32 instruction, expected an x86-64 CPU from 2008 or later");
  return ~crc32c_sse42(static_cast<const uint8_t*>(data), n, ~previous);
}

#elif defined(__aarch64__)

bool crc32c_supported() { return true; }  // the CRC extension is mandatory from ARMv8.1

__attribute__((target("+crc"))) uint32_t crc32c(const void* data, size_t n, uint32_t previous) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~previous;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __crc32cd(c, v);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = __crc32cb(c, *p++);
  return ~c;
}

#else
#error "crc32c: no CRC32C instruction known for this architecture"
#endif

}  // namespace llamatrain
