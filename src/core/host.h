// This machine's name, as every part that names a host says it (the start event's hosts, doctor's
// rows, TensorBoard's file name, which GPU each rank holds).
#pragma once

#include <string>

namespace llamatrain {

// gethostname(), or "localhost" where the system gives none.
std::string host_name();

}  // namespace llamatrain
