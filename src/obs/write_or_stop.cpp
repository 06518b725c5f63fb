// write_or_stop (obs/write_or_stop.h): the write loop of the run's log writers and their one warning.
#include "obs/write_or_stop.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace llamatrain::obs {

void write_or_stop(int& fd, std::string& error, std::string_view bytes, const std::string& path, std::string_view who,
                   std::string_view what) {
  size_t done = 0;
  while (fd >= 0 && done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n >= 0) {
      done += size_t(n);
    } else if (errno != EINTR) {
      error = fmt::format("writing {} failed: {}", path, std::strerror(errno));
      fmt::print(stderr, "warning: {}: {}; {} stops here, training goes on\n", who, error, what);
      ::close(fd);
      fd = -1;
    }
  }
}

}  // namespace llamatrain::obs
