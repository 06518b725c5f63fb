// Decoding with a KV cache (generate): one token per call through the same kernels as the passes,
// the cache (L, max_T, 2*Hkv*D) filled position by position, attention_decode over it.
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/backend.h"
#include "model/llama.h"

namespace llamatrain::model {

void LlamaModel::reset_cache(int max_T) {
  const LlamaConfig& c = config_;
  CHECK(!is_sharded(), "decoding with a model-parallel rank");
  if (max_T > c.max_seq_len) max_T = c.max_seq_len;
  cache_T_ = max_T;
  const int64_t KV = 2 * int64_t(c.n_kv_heads) * c.head_dim();
  kv_cache_.assign(int64_t(c.n_layers) * max_T * KV, 0.0f);
  dec_x_.assign(c.dim, 0.0f);
  dec_ln_.assign(c.dim, 0.0f);
  dec_qkv_.assign(c.qkv_dim(), 0.0f);
  dec_att_.assign(int64_t(c.n_heads) * c.head_dim(), 0.0f);
  dec_h13_.assign(2 * int64_t(c.ffn_dim), 0.0f);
  dec_hmid_.assign(c.ffn_dim, 0.0f);
  dec_tmp_.assign(c.dim, 0.0f);
  dec_scores_.assign(int64_t(c.n_heads) * max_T, 0.0f);
}

void LlamaModel::decode_step(float* logits, int32_t token, int pos) {
  const LlamaConfig& c = config_;
  CHECK(cache_T_ > 0, "decode_step before reset_cache");
  if (pos >= cache_T_)
    fail("decode position: got {}, expected below the {} positions of the KV cache\nhint: reset_cache with a longer "
         "context (at most max_seq_len {})",
         pos, cache_T_, c.max_seq_len);
  if (token < 0 || token >= c.vocab_size) fail("token id: got {}, expected < vocab_size {}", token, c.vocab_size);
  const int C = c.dim, F = c.ffn_dim, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim();
  const int HD = H * D, QKV = c.qkv_dim(), KV = 2 * Hkv * D;
  const auto ct = compute_type(precision_);
  const ParameterTensors& w = params_;
  float rstd;
  const int32_t p32 = pos;
  cpu::embedding_forward(dec_x_.data(), &token, w.wte, 1, C);
  for (int l = 0; l < c.n_layers; l++) {
    const float* wqkv = w.wqkv + int64_t(l) * QKV * C;
    const float* wo = w.wo + int64_t(l) * C * HD;
    const float* w13 = w.w13 + int64_t(l) * 2 * F * C;
    const float* w2 = w.w2 + int64_t(l) * C * F;
    float* cache = kv_cache_.data() + int64_t(l) * cache_T_ * KV;  // (max_T, [k heads | v heads])
    cpu::rmsnorm_forward(dec_ln_.data(), &rstd, dec_x_.data(), w.attn_norm + int64_t(l) * C, 1, C, c.norm_eps);
    cpu::matmul_forward(dec_qkv_.data(), dec_ln_.data(), wqkv, bf16_of(wqkv), 1, C, QKV, ct);
    cpu::rope_forward(dec_qkv_.data(), &p32, 1, H + Hkv, QKV, D, c.rope_theta);
    std::memcpy(cache + int64_t(pos) * KV, dec_qkv_.data() + HD, sizeof(float) * KV);
    cpu::attention_decode(dec_att_.data(), dec_scores_.data(), dec_qkv_.data(), cache, pos, H, Hkv, D);
    cpu::matmul_forward(dec_tmp_.data(), dec_att_.data(), wo, bf16_of(wo), 1, HD, C, ct);
    cpu::residual_forward(dec_x_.data(), dec_x_.data(), dec_tmp_.data(), C);
    cpu::rmsnorm_forward(dec_ln_.data(), &rstd, dec_x_.data(), w.ffn_norm + int64_t(l) * C, 1, C, c.norm_eps);
    cpu::matmul_forward(dec_h13_.data(), dec_ln_.data(), w13, bf16_of(w13), 1, C, 2 * F, ct);
    cpu::swiglu_forward(dec_hmid_.data(), dec_h13_.data(), 1, F);
    cpu::matmul_forward(dec_tmp_.data(), dec_hmid_.data(), w2, bf16_of(w2), 1, F, C, ct);
    cpu::residual_forward(dec_x_.data(), dec_x_.data(), dec_tmp_.data(), C);
  }
  cpu::rmsnorm_forward(dec_ln_.data(), &rstd, dec_x_.data(), w.norm, 1, C, c.norm_eps);
  cpu::matmul_forward(logits, dec_ln_.data(), w.wout, bf16_of(w.wout), 1, C, c.vocab_size, ct);
}

}  // namespace llamatrain::model
