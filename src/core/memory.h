// How much memory this process can still take, to refuse a job that cannot fit with a clear message
// before allocating (an allocation that overcommits would otherwise end in the OOM killer mid-run),
// and how much it has taken at most.
#pragma once

#include <cstdint>
#include <string>

namespace llamatrain {

// min(MemAvailable of /proc/meminfo, the room the memory cgroups of this process leave) in bytes; -1
// if neither can be read (the caller then skips its check). The cgroups are the process's own (from
// /proc/self/cgroup: a SLURM job's, a container's) and their ancestors, cgroup v2 (memory.max) or v1
// (memory.limit_in_bytes); each leaves its limit minus its working set (the usage without the page
// cache the kernel can drop, memory.stat's inactive_file).
int64_t available_memory_bytes();

// Throws Error "memory: <what> needs X GB (<detail>), but Y GB is available" + hint when need_bytes
// exceeds available_memory_bytes(); does nothing when that is unknown.
void check_memory_fits(int64_t need_bytes, const std::string& what, const std::string& detail, const std::string& hint);

// The process's peak resident set size so far, in bytes (getrusage's ru_maxrss).
double peak_rss_bytes();
// Its resident set size now, in bytes (/proc/self/statm); -1 if that cannot be read.
int64_t current_rss_bytes();

}  // namespace llamatrain
