// A few kilobytes of built-in English text for `llamatrain train --demo`: enough for a tiny model to
// visibly learn (the loss falls from ln(256) ~ 5.5 towards ~1.5 in a few hundred steps of byte-level
// training), with no files or downloads needed.
#pragma once

#include <string_view>

namespace llamatrain::data {

std::string_view demo_corpus();

}  // namespace llamatrain::data
