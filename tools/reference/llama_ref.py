"""PyTorch reference for Hugging Face LlamaForCausalLM numerics, written from docs/formats.md section 4,
and for the variants of the same architecture: Qwen2 (biases on q/k/v, transformers' Qwen2Attention),
Llama 3.1's rope_scaling (transformers' _compute_llama3_parameters), an explicit head_dim and
Mistral's sliding window (key j visible to query i iff i - W < j <= i).

Holds: the config (HF config.json keys), seeded parameter init by HF tensor names, a functional
forward (dtype-generic: float64 for goldens, float32/bf16-autocast for benches), the cross-entropy
loss, the AdamW + grad-clip loop used for the golden optimizer steps, and a hand-rolled safetensors
writer and strict reader (docs/formats.md section 3). Used only by tests and benches, never at run time.
Leaves out: KV cache, other rope_scaling types, o_proj/MLP biases, dropout.
"""
import json
import math
import struct
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------
@dataclass
class LlamaConfig:
    hidden_size: int  # C
    intermediate_size: int  # F
    num_attention_heads: int  # H
    num_key_value_heads: int  # Hkv
    num_hidden_layers: int  # L
    vocab_size: int  # V
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    model_type: str = "llama"  # "llama", "qwen2" (q/k/v biases) or "mistral"
    explicit_head_dim: int = 0  # config.json head_dim; 0: hidden_size / num_attention_heads
    rope_scaling: dict = None  # {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    #                             "original_max_position_embeddings"} or None
    sliding_window: int = 0  # mistral: 0 (null) for none
    bos_token_id: int = 1
    eos_token_id: object = 2  # an int or a list

    @property
    def head_dim(self):  # D
        return self.explicit_head_dim or self.hidden_size // self.num_attention_heads

    @property
    def qkv_bias(self):  # Qwen2Attention: q_proj, k_proj, v_proj with bias; o_proj without
        return self.model_type == "qwen2"

    def to_hf_json(self, torch_dtype="float32"):
        """The HF config.json keys (4.x spelling, docs/formats.md 4.1) of the family's model_type."""
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
        d = {
            "architectures": [arch[self.model_type]],
            "model_type": self.model_type,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": torch_dtype,
            "hidden_act": "silu",
        }
        if self.explicit_head_dim:
            d["head_dim"] = self.explicit_head_dim
        if self.model_type == "mistral":
            d["sliding_window"] = self.sliding_window or None
        if self.model_type == "qwen2":  # Qwen2.5's keys: the window is off
            d.update({"use_sliding_window": False, "sliding_window": 4096,
                      "max_window_layers": self.num_hidden_layers})
        return d

    @staticmethod
    def from_hf_json(d):
        use_window = d.get("model_type") == "mistral" or d.get("use_sliding_window", False)
        return LlamaConfig(
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_attention_heads=d["num_attention_heads"],
            num_key_value_heads=d.get("num_key_value_heads", d["num_attention_heads"]),
            num_hidden_layers=d["num_hidden_layers"],
            vocab_size=d["vocab_size"],
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=d.get("rope_theta", 10000.0),
            max_position_embeddings=d.get("max_position_embeddings", 2048),
            tie_word_embeddings=d.get("tie_word_embeddings", False),
            model_type=d.get("model_type", "llama"),
            explicit_head_dim=d.get("head_dim") or 0,
            rope_scaling=d.get("rope_scaling"),
            sliding_window=(d.get("sliding_window") or 0) if use_window else 0,
            bos_token_id=d.get("bos_token_id", 1),
            eos_token_id=d.get("eos_token_id", 2),
        )


def param_shapes(cfg):
    """[(hf_name, shape)] in HF module order; lm_head.weight is absent when tied (docs/formats.md 4.2)."""
    C, F_, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    D, H, Hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    out = [("model.embed_tokens.weight", (V, C))]
    for l in range(cfg.num_hidden_layers):
        p = f"model.layers.{l}."
        out += [
            (p + "self_attn.q_proj.weight", (H * D, C)),
            (p + "self_attn.k_proj.weight", (Hkv * D, C)),
            (p + "self_attn.v_proj.weight", (Hkv * D, C)),
        ]
        if cfg.qkv_bias:
            out += [
                (p + "self_attn.q_proj.bias", (H * D,)),
                (p + "self_attn.k_proj.bias", (Hkv * D,)),
                (p + "self_attn.v_proj.bias", (Hkv * D,)),
            ]
        out += [
            (p + "self_attn.o_proj.weight", (C, H * D)),
            (p + "mlp.gate_proj.weight", (F_, C)),
            (p + "mlp.up_proj.weight", (F_, C)),
            (p + "mlp.down_proj.weight", (C, F_)),
            (p + "input_layernorm.weight", (C,)),
            (p + "post_attention_layernorm.weight", (C,)),
        ]
    out.append(("model.norm.weight", (C,)))
    if not cfg.tie_word_embeddings:
        out.append(("lm_head.weight", (V, C)))
    return out


def init_params(cfg, seed, std=0.02, norm_jitter=0.1, bias_std=0.1):
    """Seeded float32 init: matrices ~ N(0, std^2); norm weights = 1 + norm_jitter * N(0, 1);
    biases ~ N(0, bias_std^2).

    Norm weights are deliberately not all ones (and biases not zero, as HF's init would leave them)
    so that their gradients and their effect on the forward are exercised.
    numpy's PCG64 generator is used because its stream is stable across versions and machines.
    """
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(cfg):
        z = rng.standard_normal(shape)  # float64 draws, rounded once to float32
        if name.endswith(".bias"):
            w = bias_std * z
        else:
            w = (1.0 + norm_jitter * z) if len(shape) == 1 else std * z
        params[name] = w.astype(np.float32)
    return params


def lm_head_name(cfg):
    return "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"


# ---------------------------------------------------------------------------------------------
# Forward (functional; params is {hf_name: torch tensor})
# ---------------------------------------------------------------------------------------------
def rmsnorm(x, weight, eps):
    """HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) in at least fp32, cast back, then * weight."""
    xf = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


def rope_inv_freq(D, theta, rope_scaling=None):
    """(D/2,) float64: theta^(-2i/D), rescaled as transformers' _compute_llama3_parameters for
    rope_type llama3 (wavelengths longer than original_max / low_freq_factor divided by factor,
    shorter than original_max / high_freq_factor kept, the band between blended)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    if rope_scaling is None:
        return inv_freq
    kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r} is not modelled here")
    factor = rope_scaling["factor"]
    low, high = rope_scaling["low_freq_factor"], rope_scaling["high_freq_factor"]
    old_len = rope_scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_bands(cfg):
    """How many of the pairs fall in each llama3 band (high kept, medium blended, low rescaled)."""
    r = cfg.rope_scaling
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
    wavelen = 2 * math.pi / inv
    old_len = r["original_max_position_embeddings"]
    high = int((wavelen < old_len / r["high_freq_factor"]).sum())
    low = int((wavelen > old_len / r["low_freq_factor"]).sum())
    return high, len(inv) - high - low, low


def rope_cos_sin(T, D, theta, dtype, rope_scaling=None, positions=None):
    """cos, sin of shape (T, D) in rotate_half layout: angle[p, i] = angle[p, i + D/2] = p * inv_freq[i];
    with positions (B, T), of shape (B, 1, T, D) at those positions (broadcast over heads)."""
    inv_freq = rope_inv_freq(D, theta, rope_scaling)  # (D/2,)
    if positions is not None:
        freqs = positions.to(torch.float64)[..., None] * inv_freq  # (B, T, D/2)
        emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # (B, 1, T, D)
        return emb.cos().to(dtype), emb.sin().to(dtype)
    pos = torch.arange(T, dtype=torch.float64)  # (T,)
    freqs = torch.outer(pos, inv_freq)  # (T, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (T, D)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    """(..., D) -> concat(-x[..., D/2:], x[..., :D/2])."""
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x (B, heads, T, D); cos/sin (T, D)."""
    return x * cos + rotate_half(x) * sin


def attention(x, params, prefix, cfg, cos, sin, doc_start=None):
    """Causal grouped-query self-attention; x (B, T, C) -> (B, T, C). Qwen2: q, k, v with biases;
    Mistral: a sliding window of cfg.sliding_window keys. doc_start (B, T): packed documents, key j
    visible to query i only if doc_start[b, i] <= j (an explicit block-diagonal causal mask)."""
    B, T, _ = x.shape
    H, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim

    def proj(name):
        return F.linear(x, params[prefix + name + ".weight"], params.get(prefix + name + ".bias"))

    q = proj("q_proj").view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    k = proj("k_proj").view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
    v = proj("v_proj").view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)
    # query head h reads kv head h // (H / Hkv)
    rep = H // Hkv
    k = k.repeat_interleave(rep, dim=1)  # (B, H, T, D)
    v = v.repeat_interleave(rep, dim=1)  # (B, H, T, D)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)  # (B, H, T, T)
    masked = torch.ones(T, T, dtype=torch.bool).triu(1)  # True above the diagonal = masked
    if cfg.sliding_window:  # Mistral: key j visible to query i iff i - W < j <= i
        masked = masked | torch.ones(T, T, dtype=torch.bool).tril(-cfg.sliding_window)
    if doc_start is not None:  # (B, T, T): key j before query i's document
        other_doc = torch.arange(T)[None, None, :] < doc_start.long()[:, :, None]
        masked = (masked[None] | other_doc)[:, None]  # (B, 1, T, T)
    scores = scores.masked_fill(masked, float("-inf"))
    # HF computes the softmax in fp32 (float64 stays float64)
    sm_dtype = torch.float64 if scores.dtype == torch.float64 else torch.float32
    probs = torch.softmax(scores, dim=-1, dtype=sm_dtype).to(v.dtype)
    y = torch.matmul(probs, v)  # (B, H, T, D)
    y = y.transpose(1, 2).reshape(B, T, H * D)
    return F.linear(y, params[prefix + "o_proj.weight"])


def mlp(x, params, prefix):
    """SwiGLU: down(silu(gate(x)) * up(x))."""
    g = F.linear(x, params[prefix + "gate_proj.weight"])  # (B, T, F)
    u = F.linear(x, params[prefix + "up_proj.weight"])  # (B, T, F)
    return F.linear(F.silu(g) * u, params[prefix + "down_proj.weight"])


def forward(params, cfg, tokens, positions=None, doc_start=None):
    """tokens (B, T) int64 -> logits (B, T, V); positions (B, T) or None: 0..T-1; doc_start (B, T) or
    None: packed documents that see only themselves (attention's mask)."""
    _, T = tokens.shape
    emb = params["model.embed_tokens.weight"]
    x = emb[tokens]  # (B, T, C)
    cos, sin = rope_cos_sin(T, cfg.head_dim, cfg.rope_theta, emb.dtype, cfg.rope_scaling, positions)
    for l in range(cfg.num_hidden_layers):
        p = f"model.layers.{l}."
        h = rmsnorm(x, params[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        x = x + attention(h, params, p + "self_attn.", cfg, cos, sin, doc_start)
        h = rmsnorm(x, params[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        x = x + mlp(h, params, p + "mlp.")
    x = rmsnorm(x, params["model.norm.weight"], cfg.rms_norm_eps)
    return F.linear(x, params[lm_head_name(cfg)])  # (B, T, V)


def cross_entropy(logits, targets):
    """Mean CE over positions with targets != -100. targets (B, T) are aligned with logits (no shift)."""
    V = logits.shape[-1]
    lf = logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits
    return F.cross_entropy(lf.reshape(-1, V), targets.reshape(-1).long(), ignore_index=IGNORE_INDEX,
                           reduction="mean")


# ---------------------------------------------------------------------------------------------
# Gradients and AdamW steps
# ---------------------------------------------------------------------------------------------
def to_torch(params_np, dtype=torch.float64, requires_grad=True):
    return {n: torch.tensor(a, dtype=dtype).requires_grad_(requires_grad) for n, a in params_np.items()}


def loss_and_grads(params, cfg, tokens, targets, positions=None, doc_start=None):
    """Returns (logits, loss, {name: grad}) with params a dict of leaf tensors."""
    for p in params.values():
        p.grad = None
    logits = forward(params, cfg, tokens, positions, doc_start)
    loss = cross_entropy(logits, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.detach().clone() for n, p in params.items()}


@dataclass
class AdamWHyper:
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    steps: int = 10

    def as_metadata(self):
        return {k: repr(getattr(self, k)) for k in
                ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip", "steps")}


def adamw_train(params, cfg, tokens, targets, hp, positions=None, doc_start=None):
    """hp.steps optimizer steps on one batch; returns (losses, pre-clip grad norms), updates params.

    Each step: loss, grads, torch.nn.utils.clip_grad_norm_ (global L2 norm over all grads;
    grads *= min(1, clip / (norm + 1e-6))), then torch.optim.AdamW with weight decay only on
    2-D weights (embeddings, projections, lm_head), none on 1-D norm weights and biases.
    """
    plist = list(params.values())
    decay = [p for p in plist if p.dim() >= 2]
    no_decay = [p for p in plist if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=hp.lr, betas=(hp.beta1, hp.beta2), eps=hp.eps, foreach=False)
    losses, norms = [], []
    for _ in range(hp.steps):
        opt.zero_grad(set_to_none=True)
        loss = cross_entropy(forward(params, cfg, tokens, positions, doc_start), targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(plist, hp.grad_clip)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return np.array(losses), np.array(norms)


@torch.no_grad()
def greedy_generate(params, cfg, prompt_ids, n_new):
    """Full-recompute greedy decoding; returns (new ids, top1-top2 logit margin at each step)."""
    ids = list(prompt_ids)
    new, margins = [], []
    for _ in range(n_new):
        logits = forward(params, cfg, torch.tensor([ids], dtype=torch.long))[0, -1]  # (V,)
        top = torch.topk(logits, 2)
        nxt = int(top.indices[0])
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(nxt)
        new.append(nxt)
    return new, margins


# ---------------------------------------------------------------------------------------------
# safetensors (docs/formats.md section 3), hand-rolled: byte-identical to the Rust crate's writer
# ---------------------------------------------------------------------------------------------
# tensor.rs enum Dtype order; the writer sorts by this order descending, then by name.
DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
               "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
               "F64", "I64", "U64"]
_NP_TO_ST = {np.dtype("bool"): "BOOL", np.dtype("uint8"): "U8", np.dtype("int8"): "I8",
             np.dtype("int16"): "I16", np.dtype("uint16"): "U16", np.dtype("float16"): "F16",
             np.dtype("int32"): "I32", np.dtype("uint32"): "U32", np.dtype("float32"): "F32",
             np.dtype("complex64"): "C64", np.dtype("float64"): "F64", np.dtype("int64"): "I64",
             np.dtype("uint64"): "U64"}
_ST_TO_NP = {v: k for k, v in _NP_TO_ST.items()}
_ST_TO_NP["BF16"] = np.dtype("uint16")  # raw bits; see BF16 and bf16_to_f32
_ST_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
            "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
            "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


class BF16:
    """Marks a uint16 array as raw bfloat16 bits for the writer (reader returns these as uint16)."""

    def __init__(self, bits):
        self.bits = np.ascontiguousarray(bits, dtype=np.uint16)


def f32_to_bf16_bits(a):
    """Round-to-nearest-even float32 -> bfloat16 bits (NaN kept quiet)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    return np.where(nan, (u >> 16) | 0x40, r).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def serialize(tensors, metadata=None):
    """{name: np.ndarray | BF16} (+ optional {str: str} metadata) -> the safetensors file bytes."""
    entries = []
    for name, t in tensors.items():
        if isinstance(t, BF16):
            dtype, arr = "BF16", t.bits
        else:
            arr = np.asarray(t)
            if arr.dtype not in _NP_TO_ST:
                raise ValueError(f"safetensors: tensor {name!r} has unsupported dtype {arr.dtype}")
            dtype = _NP_TO_ST[arr.dtype]
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        entries.append((name, dtype, list(arr.shape), data))
    # rule 1: dtype descending in enum order, then name ascending (byte order)
    entries.sort(key=lambda e: e[0].encode("utf-8"))
    entries.sort(key=lambda e: DTYPE_ORDER.index(e[1]), reverse=True)
    # rules 2-3: contiguous offsets, compact JSON, __metadata__ first, keys dtype/shape/data_offsets
    parts, off = [], 0
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError("safetensors: __metadata__ must map str to str")
        parts.append(_js("__metadata__") + ":" + _js(metadata))
    for name, dtype, shape, data in entries:
        hdr = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        parts.append(_js(name) + ":" + _js(hdr))
        off += len(data)
    header = ("{" + ",".join(parts) + "}").encode("utf-8")
    header += b" " * (-len(header) % 8)  # rule 4: pad with spaces to a multiple of 8
    return struct.pack("<Q", len(header)) + header + b"".join(e[3] for e in entries)


def _js(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def save_file(path, tensors, metadata=None):
    with open(path, "wb") as f:
        f.write(serialize(tensors, metadata))


def deserialize(buf):
    """File bytes -> ({name: np.ndarray}, metadata or None); validates as the Rust crate does.

    BF16 tensors come back as uint16 bit patterns; F4/F6/F8 are not supported.
    """
    if len(buf) < 8:
        raise ValueError(f"safetensors: file is {len(buf)} bytes, expected at least 8")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > 100_000_000:
        raise ValueError(f"safetensors: header length {n} exceeds 100000000")
    if 8 + n > len(buf):
        raise ValueError(f"safetensors: header length {n} runs past the file end ({len(buf)} bytes)")
    text = buf[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        raise ValueError("safetensors: header does not start with '{'")

    def no_dups(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                raise ValueError(f"safetensors: duplicate key {k!r}")
            d[k] = v
        return d

    hdr = json.loads(text, object_pairs_hook=no_dups)
    if not isinstance(hdr, dict):
        raise ValueError("safetensors: header is not a JSON object")
    meta = hdr.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise ValueError("safetensors: __metadata__ must map str to str")
    items = sorted(hdr.items(), key=lambda kv: tuple(kv[1]["data_offsets"]))
    data = memoryview(buf)[8 + n:]
    out, pos = {}, 0
    for name, info in items:
        dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in _ST_TO_NP:
            raise ValueError(f"safetensors: tensor {name!r} has unsupported dtype {dtype}")
        if b != pos or e < b:
            raise ValueError(f"safetensors: tensor {name!r} offsets [{b},{e}] leave a hole or overlap at {pos}")
        nbytes = math.prod(shape) * _ST_BITS[dtype] // 8
        if e - b != nbytes:
            raise ValueError(f"safetensors: tensor {name!r} spans {e - b} bytes, expected {nbytes}")
        out[name] = np.frombuffer(data[b:e], dtype=_ST_TO_NP[dtype].newbyteorder("<")).reshape(shape).copy()
        pos = e
    if pos != len(data):
        raise ValueError(f"safetensors: data buffer is {len(data)} bytes, tensors cover {pos}")
    return out, meta


def load_file(path):
    with open(path, "rb") as f:
        return deserialize(f.read())
