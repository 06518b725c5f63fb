// Internal to kernels/cpu (and its tests and benches): the row-chunk size of cpu::lmhead_ce_fused.
// The chunk is R rows of fp32 logits, R*V floats; see lmhead_ce.cpp for why R is what it is.
#pragma once

namespace llamatrain::cpu::detail {

// Rows per chunk for vocabulary size V (>= 1).
int lmhead_chunk_rows(int V);
// When > 0, replaces lmhead_chunk_rows() (tests force many small chunks; benches sweep R). Not thread-safe.
int& lmhead_chunk_rows_override();

}  // namespace llamatrain::cpu::detail
