// CRC32C (Castagnoli: reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF), computed by
// the CPU's own instruction: SSE4.2 `crc32` on x86-64 (checked at run time, so a build without
// -march=native still uses it), the ARMv8 CRC extension on aarch64. Used for TensorBoard's record
// framing (with the mask below) and for checkpoint checksums. crc32c("123456789") = 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamatrain {

// True when this CPU has the instruction (every x86-64 CPU since 2008; ARMv8 with the CRC extension).
bool crc32c_supported();

// CRC32C of n bytes, continuing from a previous result (0 for a fresh start).
uint32_t crc32c(const void* data, size_t n, uint32_t previous = 0);

// TensorBoard / TFRecord masking: rotate right by 15, then add 0xA282EAD8.
inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

}  // namespace llamatrain
