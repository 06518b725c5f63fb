#!/usr/bin/python3
"""Self-check of the PyTorch reference and of the golden files it wrote (ctest: reference.selfcheck).

(a) float64 autograd gradients of the whole model against finite differences (torch gradcheck),
    and the forward against a second, independent formulation (Meta interleaved RoPE on permuted
    q/k weights, per-head loop, hand-written RMSNorm and log-softmax);
(b) the safetensors writer reproduces docs/formats.md 3.3's test vectors byte for byte; the reader
    rejects malformed files;
(c) every golden file reads back to the arrays the generator computes now, rewrites byte-identically,
    and its AdamW trajectory matches the update formula written out in README.md.
Exits non-zero on the first failure. Runs in ~10-20 s.
"""
import importlib.util
import json
import math
import os
import struct
import sys
import time

# Missing modules are a skip, not a failure: exit 77, which ctest reports as skipped (CMakeLists.txt).
NEEDED = {"numpy": "python3-numpy", "torch": "python3-torch", "sentencepiece": "python3-sentencepiece"}
missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
if missing:
    print(f"SKIP: needs Python modules that {sys.executable} does not have: {', '.join(missing)}\n"
          f"hint: install with `bash scripts/setup.sh` (Debian/Ubuntu packages: "
          f"{' '.join(NEEDED[m] for m in missing)})")
    sys.exit(77)

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_golden  # noqa: E402
import llama_ref as ref  # noqa: E402
import make_tiny_hf  # noqa: E402

GOLDEN = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "golden"))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def max_rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-3))) if a.size else 0.0


# ---------------------------------------------------------------------------------------------
# (a) gradients by finite differences, forward by an independent formulation
# ---------------------------------------------------------------------------------------------
def tiny_batch(cfg, B, T, seed):
    rng = np.random.default_rng(seed)
    tokens = torch.from_numpy(rng.integers(0, cfg.vocab_size, size=(B, T)))
    targets = torch.from_numpy(rng.integers(0, cfg.vocab_size, size=(B, T)))
    targets[0, 1] = ref.IGNORE_INDEX
    targets[B - 1, T - 1] = ref.IGNORE_INDEX
    return tokens, targets


def check_gradcheck():
    cases = [
        ("gqa_untied", ref.LlamaConfig(hidden_size=8, intermediate_size=12, num_attention_heads=4,
                                       num_key_value_heads=2, num_hidden_layers=2, vocab_size=11,
                                       rope_theta=100.0)),
        ("mha_tied", ref.LlamaConfig(hidden_size=8, intermediate_size=10, num_attention_heads=2,
                                     num_key_value_heads=2, num_hidden_layers=1, vocab_size=9,
                                     rms_norm_eps=1e-5, tie_word_embeddings=True)),
        ("qwen_bias_window", ref.LlamaConfig(hidden_size=8, intermediate_size=12, num_attention_heads=4,
                                             num_key_value_heads=2, num_hidden_layers=1, vocab_size=11,
                                             rope_theta=1e6, tie_word_embeddings=True, model_type="qwen2",
                                             sliding_window=2)),
        ("llama3_head_dim", ref.LlamaConfig(hidden_size=8, intermediate_size=12, num_attention_heads=2,
                                            num_key_value_heads=1, num_hidden_layers=1, vocab_size=11,
                                            rope_theta=500.0, explicit_head_dim=6,
                                            rope_scaling={"rope_type": "llama3", "factor": 4.0,
                                                          "low_freq_factor": 1.0, "high_freq_factor": 2.0,
                                                          "original_max_position_embeddings": 4})),
    ]
    for name, cfg in cases:
        init = ref.init_params(cfg, 7, std=0.5, norm_jitter=0.3)
        names = list(init)
        leaves = tuple(torch.tensor(init[n], dtype=torch.float64, requires_grad=True) for n in names)
        tokens, targets = tiny_batch(cfg, 2, 5, 11)

        def fn(*ps):
            return ref.cross_entropy(ref.forward(dict(zip(names, ps)), cfg, tokens), targets)

        ok = torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False)
        check(ok, f"gradcheck {name}: autograd gradients disagree with finite differences")
        print(f"  gradcheck {name}: {sum(p.numel() for p in leaves)} params, {'ok' if ok else 'FAILED'}")


def meta_inv_freq(cfg, i, D):
    """Pair i's inverse frequency, one scalar at a time (llama3: the three bands by wavelength)."""
    inv = cfg.rope_theta ** (-2.0 * i / D)
    r = cfg.rope_scaling
    if r is None:
        return inv
    wavelen = 2 * math.pi / inv
    n = r["original_max_position_embeddings"]
    if wavelen < n / r["high_freq_factor"]:
        return inv
    if wavelen > n / r["low_freq_factor"]:
        return inv / r["factor"]
    smooth = (n / wavelen - r["low_freq_factor"]) / (r["high_freq_factor"] - r["low_freq_factor"])
    return (1 - smooth) * inv / r["factor"] + smooth * inv


def meta_forward(params, cfg, tokens, positions=None, doc_start=None):
    """Independent float64 forward: Meta layout (q/k rows permuted back), complex-pair RoPE, loops;
    q/k/v biases (Qwen2), scalar llama3 frequencies, the sliding window and the document's start
    (packed documents: doc_start (B, T), RoPE at positions (B, T)) as each query's first key."""
    C, H, Hkv, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    B, T = tokens.shape
    W = cfg.sliding_window or T

    def norm(x, w):
        ms = (x * x).sum(-1, keepdim=True) / x.shape[-1]
        return x / torch.sqrt(ms + cfg.rms_norm_eps) * w

    def hf_to_meta(w, heads):  # docs/formats.md 4.3 permute_reverse: [heads, 2, D/2, C] swap axes 1, 2
        cols = w.shape[1:]  # (C) for a weight, () for a bias
        return w.reshape(heads, 2, D // 2, *cols).transpose(1, 2).reshape(heads * D, *cols)

    def rope_pairs(x, b):  # x (T, D) in Meta layout: pairs (2i, 2i+1) rotated by p * theta^(-2i/D)
        out = torch.empty_like(x)
        for p in range(T):
            pos = p if positions is None else int(positions[b, p])
            for i in range(D // 2):
                a = pos * meta_inv_freq(cfg, i, D)
                c, s = math.cos(a), math.sin(a)
                out[p, 2 * i] = x[p, 2 * i] * c - x[p, 2 * i + 1] * s
                out[p, 2 * i + 1] = x[p, 2 * i] * s + x[p, 2 * i + 1] * c
        return out

    x = params["model.embed_tokens.weight"][tokens]  # (B, T, C)
    for l in range(cfg.num_hidden_layers):
        p = f"model.layers.{l}."
        wq = hf_to_meta(params[p + "self_attn.q_proj.weight"], H)
        wk = hf_to_meta(params[p + "self_attn.k_proj.weight"], Hkv)
        wv = params[p + "self_attn.v_proj.weight"]
        zero = torch.zeros((), dtype=x.dtype)
        bq = hf_to_meta(params[p + "self_attn.q_proj.bias"], H) if cfg.qkv_bias else zero
        bk = hf_to_meta(params[p + "self_attn.k_proj.bias"], Hkv) if cfg.qkv_bias else zero
        bv = params[p + "self_attn.v_proj.bias"] if cfg.qkv_bias else zero
        h = norm(x, params[p + "input_layernorm.weight"])
        att = torch.zeros(B, T, H * D, dtype=x.dtype)
        for b in range(B):
            q, k, v = h[b] @ wq.T + bq, h[b] @ wk.T + bk, h[b] @ wv.T + bv  # (T, H*D), (T, Hkv*D) x 2
            for hh in range(H):
                g = hh // (H // Hkv)
                qh = rope_pairs(q[:, hh * D:(hh + 1) * D], b)
                kh = rope_pairs(k[:, g * D:(g + 1) * D], b)
                vh = v[:, g * D:(g + 1) * D]
                for t in range(T):
                    u0 = max(0, t - W + 1)  # the first key in the window (and in the document)
                    if doc_start is not None:
                        u0 = max(u0, int(doc_start[b, t]))
                    s = (kh[u0:t + 1] @ qh[t]) / math.sqrt(D)  # (t+1-u0,)
                    w = torch.exp(s - s.max())
                    att[b, t, hh * D:(hh + 1) * D] = (w / w.sum()) @ vh[u0:t + 1]
        x = x + att @ params[p + "self_attn.o_proj.weight"].T
        h = norm(x, params[p + "post_attention_layernorm.weight"])
        gate = h @ params[p + "mlp.gate_proj.weight"].T
        up = h @ params[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + torch.exp(-gate)) * up) @ params[p + "mlp.down_proj.weight"].T
    x = norm(x, params["model.norm.weight"])
    return x @ params[ref.lm_head_name(cfg)].T


def meta_loss(logits, targets):
    lse = torch.logsumexp(logits, dim=-1)  # (B, T)
    keep = targets != ref.IGNORE_INDEX
    picked = torch.gather(logits, -1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return ((lse - picked) * keep).sum() / keep.sum()


# ---------------------------------------------------------------------------------------------
# (b) safetensors writer and reader
# ---------------------------------------------------------------------------------------------
def check_safetensors():
    empty = ref.serialize({})
    check(empty == struct.pack("<Q", 8) + b"{}      ", f"empty dict serializes to {empty!r}")

    attn = ref.serialize({"attn.0": np.arange(6, dtype=np.float32).reshape(1, 2, 3)})
    hdr = b'{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}'
    check(len(hdr) == 64, "test vector header is 64 bytes")
    check(attn == struct.pack("<Q", 64) + hdr + np.arange(6, dtype="<f4").tobytes(),
          f"attn.0 vector mismatch: {attn[:80]!r}")

    # ordering: dtype descending (F64 > F32 > I32 > BF16 > U8), then name; __metadata__ first
    t = {"b": np.zeros(2, np.float32), "a": np.zeros(1, np.float32), "i": np.zeros(3, np.int32),
         "d": np.zeros(1, np.float64), "h": ref.BF16(np.array([0x3F80], np.uint16)), "u": np.zeros(1, np.uint8),
         "s": np.array(2.5, np.float32)}
    buf = ref.serialize(t, {"format": "pt"})
    n = struct.unpack("<Q", buf[:8])[0]
    text = buf[8:8 + n].decode()
    check(n % 8 == 0 and text.rstrip(" ").endswith("}"), "header padded with spaces to a multiple of 8")
    keys = list(json.loads(text))
    check(keys == ["__metadata__", "d", "a", "b", "s", "i", "h", "u"], f"key order {keys}")
    check('"s":{"dtype":"F32","shape":[],' in text, "scalar has shape []")
    back, meta = ref.deserialize(buf)
    check(meta == {"format": "pt"}, f"metadata read back {meta}")
    check(all(np.array_equal(back[k], t[k].bits if isinstance(t[k], ref.BF16) else t[k]) for k in t),
          "round trip of mixed dtypes")
    check(ref.f32_to_bf16_bits(np.array([1.0, 1.00390625, 1.01171875, -2.0], np.float32)).tolist()
          == [0x3F80, 0x3F80, 0x3F82, 0xC000], "bf16 round-to-nearest-even")

    # the reader refuses malformed files
    good = ref.serialize({"x": np.arange(4, dtype=np.float32)})
    hx = good[8:8 + struct.unpack("<Q", good[:8])[0]]
    bad = {
        "truncated data": good[:-1],
        "trailing bytes": good + b"\0",
        "header past end": struct.pack("<Q", 10 ** 6) + good[8:],
        "hole in offsets": struct.pack("<Q", len(hx)) + hx.replace(b"[0,16]", b"[4,16]") + good[8 + len(hx):],
        "wrong byte count": struct.pack("<Q", len(hx)) + hx.replace(b"[4]", b"[5]") + good[8 + len(hx):],
        "duplicate key": (lambda h: struct.pack("<Q", len(h)) + h)(
            b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            b'"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}') + bytes(8),
        "non-string metadata": (lambda h: struct.pack("<Q", len(h)) + h)(b'{"__metadata__":{"a":1}}'),
    }
    for what, b in bad.items():
        try:
            ref.deserialize(b)
            check(False, f"reader accepted a file with {what}")
        except ValueError:
            pass
    print(f"  safetensors: test vectors, ordering, round trip, {len(bad)} malformed files refused")


# ---------------------------------------------------------------------------------------------
# (c) golden files
# ---------------------------------------------------------------------------------------------
def manual_adamw(init, cfg, tokens, targets, hp, docs):
    """The README's AdamW + clip formulas in numpy float64; grads from the reference's autograd."""
    p = {n: a.astype(np.float64) for n, a in init.items()}
    m = {n: np.zeros_like(a) for n, a in p.items()}
    v = {n: np.zeros_like(a) for n, a in p.items()}
    for step in range(1, hp.steps + 1):
        _, _, g = ref.loss_and_grads(ref.to_torch(p), cfg, tokens, targets, **docs)
        g = {n: t.numpy() for n, t in g.items()}
        norm = math.sqrt(sum(float((a * a).sum()) for a in g.values()))
        scale = min(1.0, hp.grad_clip / (norm + 1e-6))
        for n in p:
            gr = g[n] * scale
            wd = hp.weight_decay if p[n].ndim >= 2 else 0.0
            p[n] *= 1 - hp.lr * wd
            m[n] = hp.beta1 * m[n] + (1 - hp.beta1) * gr
            v[n] = hp.beta2 * v[n] + (1 - hp.beta2) * gr * gr
            mhat = m[n] / (1 - hp.beta1 ** step)
            vhat = v[n] / (1 - hp.beta2 ** step)
            p[n] -= hp.lr * mhat / (np.sqrt(vhat) + hp.eps)
    return p


def check_golden_case(name):
    cfg, B, T, seed, clip = gen_golden.CASES[name]
    d = os.path.join(GOLDEN, name)
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    check(cj == json.loads(json.dumps(cfg.to_hf_json())), f"{name}: config.json differs from the case table")
    check(ref.LlamaConfig.from_hf_json(cj) == cfg, f"{name}: config.json does not parse back")
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        mbytes = f.read()
    with open(os.path.join(d, "golden.safetensors"), "rb") as f:
        gbytes = f.read()
    model, mmeta = ref.deserialize(mbytes)
    gold, gmeta = ref.deserialize(gbytes)
    check(ref.serialize(model, mmeta) == mbytes, f"{name}: model.safetensors does not rewrite byte-identically")
    check(ref.serialize(gold, gmeta) == gbytes, f"{name}: golden.safetensors does not rewrite byte-identically")
    check(mmeta == {"format": "pt"}, f"{name}: model metadata {mmeta}")
    hp = ref.AdamWHyper(grad_clip=clip)
    check(all(gmeta[k] == v for k, v in hp.as_metadata().items()), f"{name}: golden metadata {gmeta}")

    init, fresh = gen_golden.compute_golden(cfg, B, T, seed, hp, gen_golden.EXTRAS.get(name))
    check(list(model) == sorted(init, key=str.encode) and all(model[n].dtype == np.float32 for n in model),
          f"{name}: model tensor names/dtypes")
    check(all(np.array_equal(model[n], init[n]) for n in init), f"{name}: model weights differ from the seeded init")
    check(set(gold) == set(fresh), f"{name}: golden tensor names {sorted(set(gold) ^ set(fresh))}")
    for k in ("tokens", "targets", "positions", "doc_start"):
        if k in gold:
            check(gold[k].dtype == np.int32 and np.array_equal(gold[k], fresh[k]), f"{name}: {k}")
    tg = gold["targets"]
    check(all((tg[b] == ref.IGNORE_INDEX).any() for b in range(B)) and tg[B - 1, T - 1] == ref.IGNORE_INDEX,
          f"{name}: ignored targets")
    worst = max(max_rel(gold[k], fresh[k]) for k in fresh if k not in ("tokens", "targets", "positions", "doc_start"))
    check(worst < 1e-6, f"{name}: golden arrays differ from a fresh computation by {worst:.2e} relative")
    check(gold["loss"].shape == () and gold["logits"].shape == (B, T, cfg.vocab_size), f"{name}: shapes")
    check(abs(float(gold["adamw.losses"][0]) - float(gold["loss"])) < 1e-6, f"{name}: adamw.losses[0] != loss")

    # the forward, against the independent formulation (float64, before rounding to F32)
    params = ref.to_torch(init, torch.float64, requires_grad=False)
    tok = torch.from_numpy(gold["tokens"]).long()
    tgt = torch.from_numpy(gold["targets"]).long()
    docs = {k: torch.from_numpy(gold[k]) for k in ("positions", "doc_start") if k in gold}
    lm = meta_forward(params, cfg, tok, **docs)
    l64 = ref.forward(params, cfg, tok, **docs)
    dl = float((lm - l64).abs().max())
    check(dl < 1e-12, f"{name}: HF-layout and Meta-layout forwards differ by {dl:.2e}")
    dloss = abs(float(meta_loss(lm, tgt)) - float(ref.cross_entropy(l64, tgt)))
    check(dloss < 1e-12, f"{name}: loss formulations differ by {dloss:.2e}")
    check(max_rel(gold["logits"], lm.numpy()) < 1e-6, f"{name}: stored logits vs independent forward")

    # the AdamW trajectory, against the formulas in README.md
    manual = manual_adamw(init, cfg, tok, tgt, hp, docs)
    worst_p = max(max_rel(gold["final." + n], manual[n]) for n in init)
    check(worst_p < 1e-6, f"{name}: final params vs hand-written AdamW differ by {worst_p:.2e} relative")
    moved = max(float(np.abs(gold["final." + n] - init[n]).max()) for n in init)
    if "greedy.tokens" in gold:  # the stored generation regenerates, and is not a near-tie
        new, margins = ref.greedy_generate(params, cfg, gold["greedy.prompt"].tolist(), len(gold["greedy.tokens"]))
        check(new == gold["greedy.tokens"].tolist(), f"{name}: greedy tokens do not regenerate")
        check(min(margins) > 1e-4, f"{name}: a near-tie in the greedy generation {new} {margins}")
    if cfg.rope_scaling is not None:
        check(min(ref.rope_bands(cfg)) > 0, f"{name}: llama3 bands (high, medium, low) {ref.rope_bands(cfg)}")
        check(T > cfg.rope_scaling["original_max_position_embeddings"], f"{name}: T within the original context")
    if cfg.sliding_window:
        check(T > cfg.sliding_window, f"{name}: the window is shorter than the sequence")
    print(f"  golden {name}: {len(gold)} tensors, fresh-vs-stored {worst:.1e}, HF-vs-Meta forward {dl:.1e}, "
          f"AdamW formula {worst_p:.1e}, max param change {moved:.4f}")


def check_tiny_hf():
    import sentencepiece as spm
    d = os.path.join(GOLDEN, "tiny_hf")
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    with open(os.path.join(d, "config.json")) as f:
        cfg = ref.LlamaConfig.from_hf_json(json.load(f))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))
    check(sp.get_piece_size() == cfg.vocab_size, "tiny_hf: vocab_size != tokenizer size")
    check((sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1), "tiny_hf: special ids")
    check(sp.id_to_piece(3) == "<0x00>" and sp.id_to_piece(258) == "<0xFF>", "tiny_hf: byte pieces at 3..258")
    params, meta = ref.load_file(os.path.join(d, "model.safetensors"))
    check(meta == {"format": "pt"}, "tiny_hf: metadata")
    check(sorted(params) == sorted(n for n, _ in ref.param_shapes(cfg)), "tiny_hf: tensor names")
    p64 = ref.to_torch(params, torch.float64, requires_grad=False)
    check(len(exp["cases"]) >= 2 and exp["cases"][0]["prompt"] == exp["prompt"], "tiny_hf: cases")
    for c in exp["cases"]:
        check(c["prompt_ids"] == [1] + sp.encode(c["prompt"]), f"tiny_hf: prompt ids of {c['prompt']!r}")
        new, margins = ref.greedy_generate(p64, cfg, c["prompt_ids"], len(c["greedy_ids"]))
        check(new == c["greedy_ids"] and len(new) == 20, f"tiny_hf: greedy ids of {c['prompt']!r}")
        check(sp.decode(new) == c["greedy_text"], f"tiny_hf: greedy text of {c['prompt']!r}")
        check(len(set(new)) > 5 and min(margins) > 1e-3, f"tiny_hf: degenerate generation {c['prompt']!r}")
    print(f"  tiny_hf: vocab {cfg.vocab_size}, {len(exp['cases'])} prompts tokenized and regenerated")


def check_tiny_variants():
    """tiny_qwen2 / tiny_llama3 are what make_tiny_hf.py writes now: the same bytes from a fresh run."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for name in make_tiny_hf.VARIANTS:
            fresh = os.path.join(tmp, name)
            make_tiny_hf.write_variant(fresh, name)
            stored = os.path.join(GOLDEN, name)
            files = sorted(os.listdir(fresh))
            check(files == sorted(os.listdir(stored)), f"{name}: files {files}")
            for f in files:
                with open(os.path.join(fresh, f), "rb") as a, open(os.path.join(stored, f), "rb") as b:
                    check(a.read() == b.read(), f"{name}: {f} differs from a fresh make_tiny_hf.py run")
            params, meta = ref.load_file(os.path.join(stored, "model.safetensors"))
            v = make_tiny_hf.VARIANTS[name]
            with open(os.path.join(stored, "config.json")) as f:
                cfg = json.load(f)
            shapes = dict(make_tiny_hf.variant_shapes(v, cfg["vocab_size"]))
            check(meta == {"format": "pt"} and sorted(params) == sorted(shapes), f"{name}: tensor names")
            check(all(tuple(params[n].shape) == s for n, s in shapes.items()), f"{name}: tensor shapes")
            print(f"  {name}: {len(params)} tensors, regenerated byte for byte")


def main():
    torch.set_num_threads(1)
    t0 = time.time()
    print("(a) gradients and forward")
    check_gradcheck()
    print("(b) safetensors")
    check_safetensors()
    print("(c) golden files")
    for name in gen_golden.CASES:
        check_golden_case(name)
    check_tiny_hf()
    check_tiny_variants()
    print(f"{len(failures)} failure(s) in {time.time() - t0:.1f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
