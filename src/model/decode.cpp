// Decoding with a KV cache (generate): one token per call through the same kernels as the passes,
// the cache (L, max_T, 2*Hkv*D) filled position by position, attention_decode over it.
#include "core/error.h"
#include "model/llama.h"

namespace llamatrain::model {

void LlamaModel::reset_cache(int max_T) {
  const LlamaConfig& c = config_;
  CHECK(!is_sharded(), "decoding with a model-parallel rank");
  if (max_T > c.max_seq_len) max_T = c.max_seq_len;
  cache_T_ = max_T;
  const int64_t KV = 2 * int64_t(c.n_kv_heads) * c.head_dim();
  kv_cache_.assign_zero(int64_t(c.n_layers) * max_T * KV);
  dec_x_.assign_zero(c.dim);
  dec_ln_.assign_zero(c.dim);
  dec_qkv_.assign_zero(c.qkv_dim());
  dec_att_.assign_zero(int64_t(c.n_heads) * c.head_dim());
  dec_h13_.assign_zero(2 * int64_t(c.ffn_dim));
  dec_hmid_.assign_zero(c.ffn_dim);
  dec_tmp_.assign_zero(c.dim);
  dec_scores_.assign_zero(int64_t(c.n_heads) * max_T);
  dec_rstd_.assign_zero(1);
  dec_ids_.assign_zero(2);
  if (!k_.host_memory()) dec_logits_.assign_zero(c.vocab_size);
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
  const ParameterTensors& w = params_;
  float* rstd = dec_rstd_.data();
  const int32_t ids[2] = {token, pos};
  k_.copy_from_host(dec_ids_.data(), ids, sizeof(ids));
  const int32_t* tok = dec_ids_.data();
  const int32_t* p32 = dec_ids_.data() + 1;
  float* x = dec_x_.data();
  float* ln = dec_ln_.data();
  float* qkv = dec_qkv_.data();
  float* tmp = dec_tmp_.data();
  k_.embedding_forward(x, tok, w.wte, 1, C);
  for (int l = 0; l < c.n_layers; l++) {
    const float* wqkv = w.wqkv + int64_t(l) * QKV * C;
    const float* wo = w.wo + int64_t(l) * C * HD;
    const float* w13 = w.w13 + int64_t(l) * 2 * F * C;
    const float* w2 = w.w2 + int64_t(l) * C * F;
    float* cache = kv_cache_.data() + int64_t(l) * cache_T_ * KV;  // (max_T, [k heads | v heads])
    k_.rmsnorm_forward(ln, rstd, x, w.attn_norm + int64_t(l) * C, 1, C, c.norm_eps);
    k_.matmul_forward(qkv, ln, wqkv, 1, C, QKV);
    if (w.bqkv) k_.bias_forward(qkv, w.bqkv + int64_t(l) * QKV, 1, QKV);
    k_.rope_forward(qkv, p32, 1, H + Hkv, QKV, D, c.rope_freqs());
    k_.copy(cache + int64_t(pos) * KV, qkv + HD, sizeof(float) * size_t(KV));
    k_.attention_decode(dec_att_.data(), dec_scores_.data(), qkv, cache, pos, H, Hkv, D, c.sliding_window);
    k_.matmul_forward(tmp, dec_att_.data(), wo, 1, HD, C);
    k_.residual_forward(x, x, tmp, C);
    k_.rmsnorm_forward(ln, rstd, x, w.ffn_norm + int64_t(l) * C, 1, C, c.norm_eps);
    k_.matmul_forward(dec_h13_.data(), ln, w13, 1, C, 2 * F);
    k_.swiglu_forward(dec_hmid_.data(), dec_h13_.data(), 1, F);
    k_.matmul_forward(tmp, dec_hmid_.data(), w2, 1, F, C);
    k_.residual_forward(x, x, tmp, C);
  }
  k_.rmsnorm_forward(ln, rstd, x, w.norm, 1, C, c.norm_eps);
  if (k_.host_memory()) {
    k_.matmul_forward(logits, ln, w.wout, 1, C, c.vocab_size);
    return;
  }
  k_.matmul_forward(dec_logits_.data(), ln, w.wout, 1, C, c.vocab_size);
  k_.copy_to_host(logits, dec_logits_.data(), sizeof(float) * size_t(c.vocab_size));
}

}  // namespace llamatrain::model
