// The emulator's device memory: every allocation lies in one reserved region of the address space
// that is readable and writable only inside a DeviceAccess scope (a kernel, a runtime copy, the
// emulated gemm); outside one, host code that dereferences a device pointer gets SIGSEGV, reported
// as such with the allocation it hit, as on a GPU where a device pointer means nothing to the host.
// The emulated device has LLAMATRAIN_EMU_DEVICE_MEMORY bytes (default 16G; suffixes K, M, G), so an
// allocation past it fails as cudaMalloc does (LLAMATRAIN_EMU_OOM_AT_ALLOCATION=N fails the N-th). New
// allocations are filled with garbage (0xff bytes: NaN as floats), as cudaMalloc's memory is
// uninitialized.
#pragma once

#include <cstddef>
#include <cstdint>

namespace emu {

// Prints "cuda emulator: <what>" to stderr and aborts (a kernel or runtime bug, as a GPU trap).
[[noreturn]] void fatal(const char* what);

void* device_malloc(size_t bytes);  // nullptr when the emulated device is full
void device_release(void* p);       // nullptr is fine; anything else must come from device_malloc
size_t device_bytes_in_use();
size_t device_bytes_total();
// Whether [p, p + bytes) lies inside one live allocation.
bool is_device_range(const void* p, size_t bytes);

// While one exists (they nest), device memory is readable and writable.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

}  // namespace emu
