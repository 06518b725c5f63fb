#!/usr/bin/python3
"""Writes tests/golden/tiny_hf/ (a tiny random Llama 2 in Hugging Face layout with a real tokenizer) and
the tiny Qwen2 and Llama 3 shaped folders tests/golden/tiny_qwen2/ and tests/golden/tiny_llama3/.

tiny_hf: config.json, model.safetensors (F32, HF names), tokenizer.model (trained here with Debian's
spm_train on the built-in text below, with Llama 2's settings: BPE, byte_fallback, unk/bos/eos 0/1/2,
no pad, identity normalizer, dummy prefix), expected.json (prompt ids from python3-sentencepiece with
BOS first, 20 greedy tokens by full recompute in float64, decoded text, top-2 logit margins).

tiny_qwen2 (model_type qwen2: q/k/v biases, tied embeddings, vocab_size 512 above the tokenizer's 459
tokens, no BOS, BF16 weights) and tiny_llama3 (model_type llama: GQA, head_dim 32 with hidden 64 / 4
heads, rope_scaling llama3, eos_token_id a list, untied, F32 weights): config.json, model.safetensors,
generation_config.json, and a byte-level BPE tokenizer.json (merges learned here from the text below,
the Qwen2 / Llama 3 pre-tokenizer, normalizer and special tokens) with its tokenizer_config.json.
Everything is written deterministically (seeded numpy draws, sorted merges, fixed JSON layout).
Usage: /usr/bin/python3 tools/reference/make_tiny_hf.py [--out tests/golden/tiny_hf] [--variants-only]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402

VOCAB = 512  # target size: 3 specials + 256 byte pieces + characters + BPE merges
SEED = 2030  # chosen among 2024..2039 for the largest min top-2 margin (>0.06) on both prompts
INIT_STD = 0.2  # large enough that greedy decoding does not lock onto one token at once
N_NEW = 20
PROMPTS = ["Once upon a time, a little fox", "The river runs past the old mill and"]

TEXT = """\
Once upon a time, in a small village at the edge of a great forest, there lived a little fox named Pip.
Pip liked to run along the river in the morning, when the water was cold and the grass was wet.
Every day she met the old miller, who sat in front of his mill and watched the wheel turn.
"Good morning, Pip," said the miller. "Where are you going today?"
"I am going to find the tallest tree in the forest," said Pip, "so that I can see the whole world."
The miller laughed. "The world is larger than any tree, little one. But go, and come back before dark."
So Pip ran into the forest. She passed the pond where the frogs were singing, and the hill where the
rabbits had their homes. She walked past a field of yellow flowers and a wall of grey stones.
At noon she was tired and hungry, so she sat under an oak tree and ate a few red berries.
A crow landed on a branch above her. "What are you looking for?" asked the crow.
"The tallest tree," said Pip. "Do you know where it is?"
"Of course," said the crow. "I fly over the forest every day. Follow me, and I will show you."
The crow flew from tree to tree, and Pip ran below, jumping over roots and rocks.
After a long time they came to a clearing, and in the middle stood a tree so tall that its top was
lost in the clouds. Pip began to climb. She climbed for an hour, and then for another hour.
When she reached the top, she looked around. She could see the river, the mill, the village, the hills
and, far away, the sea, shining in the evening sun. The world was indeed very large.
Pip smiled, climbed down, and ran home before dark, just as she had promised the old miller.
That night she told her mother about the crow, the tall tree and the shining sea, and then she fell
asleep and dreamed of all the places she would visit one day.

The river runs past the old mill and through the middle of the village. In spring it is wide and fast,
and the children are not allowed to swim in it. In summer it becomes slow and warm, and everyone goes
down to the water in the afternoon. The miller says that the river is older than the village, older
than the forest, and older than the hills. He says that it has seen many things and remembers them all.
The baker bakes bread every morning before the sun comes up. He makes round loaves and long loaves,
sweet rolls with raisins and small cakes with honey. The smell of fresh bread fills the street, and
people open their windows to let it in. On market days he bakes twice as much, and still it is not enough.
The teacher at the village school has twelve students. She teaches them to read and to write, to count
and to measure, and to name the stars in the sky. On clear nights she takes them up the hill to look at
the moon through an old brass telescope that belonged to her grandfather.
In the autumn the leaves turn red and gold, and the farmers bring in the harvest. There are apples and
pears, pumpkins and potatoes, wheat and barley. The whole village works together, and when the work is
done there is a feast with music and dancing that lasts until midnight.
In the winter the snow covers the roofs and the fields, and the river freezes near the banks. The
children build a snowman in the square and give him a carrot for a nose and a hat made of straw.
The miller keeps a fire burning in the mill all day long, and anyone who is cold may come in and sit by it.

A computer is a machine that follows instructions. A program is a list of instructions, written in a
language that the computer can understand. Some programs are small and do one simple thing, like adding
two numbers. Other programs are very large and do many things at once, like running a whole city.
To train a language model, we show it a great deal of text and ask it to guess the next word, again and
again. At first its guesses are random. Slowly, step by step, it learns which words tend to follow which,
and its guesses get better. The numbers that it learns are called weights, and there can be millions of them.
A small model can learn simple patterns, such as the fact that a sentence starts with a capital letter and
ends with a full stop. A large model can learn much more: grammar, facts about the world, and even how to
write a short story about a little fox who wanted to see the whole world from the top of a tall tree.
In 1969 people walked on the moon for the first time. In 2024 there were more than 8000000000 people on Earth.
The numbers 3, 14, 159 and 2653 are the first digits of pi, which is about 3.14159265.
"""


def train_tokenizer(workdir):
    """Trains tokenizer.model with spm_train inside workdir; returns its path.

    Relative paths keep the temporary directory's name out of the stored trainer_spec, so the
    output is byte-identical from run to run.
    """
    with open(os.path.join(workdir, "corpus.txt"), "w") as f:
        f.write(TEXT)
    cmd = ["spm_train", "--input=corpus.txt", "--model_prefix=tokenizer", "--model_type=bpe",
           f"--vocab_size={VOCAB}", "--byte_fallback=true", "--add_dummy_prefix=true",
           "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1", "--split_digits=true",
           "--allow_whitespace_only_pieces=true", "--normalization_rule_name=identity",
           "--remove_extra_whitespaces=false", "--character_coverage=1.0", "--num_threads=1",
           "--minloglevel=2"]
    subprocess.run(cmd, check=True, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return os.path.join(workdir, "tokenizer.model")


def greedy_case(params, cfg, sp, prompt):
    prompt_ids = [1] + sp.encode(prompt)
    new_ids, margins = ref.greedy_generate(params, cfg, prompt_ids, N_NEW)
    return {"prompt": prompt, "prompt_ids": prompt_ids, "greedy_ids": new_ids,
            "greedy_text": sp.decode(new_ids), "top2_logit_margins": [round(m, 6) for m in margins]}


# ---------------------------------------------------------------------------------------------
# The Qwen2 and Llama 3 shaped folders
# ---------------------------------------------------------------------------------------------
# The split regexes of the two tokenizer.json files (Llama 3: digits in runs of up to three; Qwen2:
# one digit per pre-token).
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
# An ASCII approximation of those regexes (Python's re has no \p{L}), used only to learn merges.
TRAIN_SPLIT = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*|"
                         r"\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_alphabet():
    """GPT-2's reversible byte -> printable character map: printable Latin-1 bytes stand for
    themselves, the other 68 take the code points from 256 on, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def learn_merges(text, n_merges):
    """Plain byte-level BPE training: repeatedly merge the most frequent adjacent pair (ties: the
    smallest pair in code point order), over the pre-tokens of text. Returns [(a, b)]."""
    alpha = byte_alphabet()
    words = {}
    for piece in TRAIN_SPLIT.findall(text):
        w = tuple(alpha[b] for b in piece.encode("utf-8"))
        words[w] = words.get(w, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    return merges


def added_token(content, id_):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def tokenizer_json(family, n_merges, specials, bos):
    """A tokenizer.json of the family's layout; specials are numbered after the BPE vocabulary."""
    alpha = byte_alphabet()
    merges = learn_merges(TEXT, n_merges)
    vocab = {alpha[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    assert len(vocab) == 256 + len(merges), "a merge made a token twice"
    first = len(vocab)
    added = [added_token(t, first + i) for i, t in enumerate(specials)]
    split = {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT if family == "qwen2" else LLAMA3_SPLIT},
             "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    if bos is None:
        post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    else:
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [first + specials.index(bos)], "tokens": [bos]}}}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"} if family == "qwen2" else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": family == "llama3", "vocab": vocab,
                  # Qwen2's files spell merges "a b", newer Llama 3 files as pairs.
                  "merges": [f"{a} {b}" for a, b in merges] if family == "qwen2" else [[a, b] for a, b in merges]},
    }, first


CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")
LLAMA3_CHAT = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
               "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

VARIANTS = {
    # Qwen2.5's small-model layout: biases on q/k/v, tied embeddings, rope_theta 1e6, eps 1e-6, a
    # vocab_size padded above the tokenizer, no BOS (bos_token_id is the eos id, as Qwen2.5 ships it).
    "tiny_qwen2": dict(family="qwen2", seed=2041, dtype="BF16", hidden=64, ffn=176, heads=4, kv_heads=2, layers=2,
                       head_dim=None, vocab_size=512, n_merges=200, tied=True, bias=True,
                       specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
    # Llama 3.1's layout: GQA, head_dim given (32, not hidden / heads = 16), rope_theta 5e5,
    # rope_scaling llama3, BOS <|begin_of_text|>, eos_token_id a list, untied.
    "tiny_llama3": dict(family="llama3", seed=2042, dtype="F32", hidden=64, ffn=96, heads=4, kv_heads=2, layers=2,
                        head_dim=32, vocab_size=512, n_merges=246, tied=False, bias=False,
                        specials=["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                                  "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                                  "<|eom_id|>", "<|eot_id|>"]),
}


def variant_shapes(v, vocab_size):
    """[(hf_name, shape)] in transformers' module order (biases after their weights)."""
    C, F_, H, Hkv = v["hidden"], v["ffn"], v["heads"], v["kv_heads"]
    D = v["head_dim"] or C // H
    out = [("model.embed_tokens.weight", (vocab_size, C))]
    for l in range(v["layers"]):
        p = f"model.layers.{l}.self_attn."
        for proj, rows in (("q_proj", H * D), ("k_proj", Hkv * D), ("v_proj", Hkv * D)):
            out.append((p + proj + ".weight", (rows, C)))
            if v["bias"]:
                out.append((p + proj + ".bias", (rows,)))
        p = f"model.layers.{l}."
        out += [(p + "self_attn.o_proj.weight", (C, H * D)), (p + "mlp.gate_proj.weight", (F_, C)),
                (p + "mlp.up_proj.weight", (F_, C)), (p + "mlp.down_proj.weight", (C, F_)),
                (p + "input_layernorm.weight", (C,)), (p + "post_attention_layernorm.weight", (C,))]
    out.append(("model.norm.weight", (C,)))
    if not v["tied"]:
        out.append(("lm_head.weight", (vocab_size, C)))
    return out


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_variant(out, name):
    v = VARIANTS[name]
    os.makedirs(out, exist_ok=True)
    qwen = v["family"] == "qwen2"
    bos = None if qwen else v["specials"][0]
    tok, first = tokenizer_json(v["family"], v["n_merges"], v["specials"], bos)
    n_tokens = first + len(v["specials"])
    V = v["vocab_size"]
    assert n_tokens <= V and (qwen or n_tokens == V), (name, n_tokens, V)
    ids = {t: first + i for i, t in enumerate(v["specials"])}
    write_json(os.path.join(out, "tokenizer.json"), tok)

    if qwen:
        eos = ids["<|endoftext|>"]
        cfg = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": eos,
               "eos_token_id": eos, "hidden_act": "silu", "hidden_size": v["hidden"], "initializer_range": 0.02,
               "intermediate_size": v["ffn"], "max_position_embeddings": 256, "max_window_layers": v["layers"],
               "model_type": "qwen2", "num_attention_heads": v["heads"], "num_hidden_layers": v["layers"],
               "num_key_value_heads": v["kv_heads"], "rms_norm_eps": 1e-06, "rope_scaling": None,
               "rope_theta": 1000000.0, "sliding_window": 256, "tie_word_embeddings": True,
               "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": V}
        gen = {"bos_token_id": eos, "eos_token_id": eos, "max_new_tokens": 64}
        tc = {"add_prefix_space": False, "bos_token": None, "chat_template": CHATML, "clean_up_tokenization_spaces": False,
              "eos_token": "<|endoftext|>", "errors": "replace", "model_max_length": 256, "pad_token": "<|endoftext|>",
              "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    else:
        eos_list = [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]]
        cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
               "bos_token_id": ids[bos], "eos_token_id": eos_list, "head_dim": v["head_dim"], "hidden_act": "silu",
               "hidden_size": v["hidden"], "initializer_range": 0.02, "intermediate_size": v["ffn"],
               "max_position_embeddings": 256, "mlp_bias": False, "model_type": "llama",
               "num_attention_heads": v["heads"], "num_hidden_layers": v["layers"], "num_key_value_heads": v["kv_heads"],
               "pretraining_tp": 1, "rms_norm_eps": 1e-05,
               "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                "original_max_position_embeddings": 64, "rope_type": "llama3"},
               "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
               "vocab_size": V}
        gen = {"bos_token_id": ids[bos], "eos_token_id": eos_list, "do_sample": True, "temperature": 0.6,
               "top_p": 0.9}
        tc = {"bos_token": bos, "chat_template": LLAMA3_CHAT, "clean_up_tokenization_spaces": True,
              "eos_token": "<|eot_id|>", "model_input_names": ["input_ids", "attention_mask"],
              "model_max_length": 256, "tokenizer_class": "PreTrainedTokenizerFast"}
    tc["added_tokens_decoder"] = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                     "single_word", "special")}
                                  for t in tok["added_tokens"]}
    write_json(os.path.join(out, "config.json"), cfg)
    write_json(os.path.join(out, "generation_config.json"), gen)
    write_json(os.path.join(out, "tokenizer_config.json"), tc)

    rng = np.random.default_rng(v["seed"])
    tensors = {}
    for hf, shape in variant_shapes(v, V):
        z = rng.standard_normal(shape)
        if len(shape) == 1 and hf.endswith("norm.weight"):
            w = 1.0 + 0.1 * z
        elif len(shape) == 1:  # a q/k/v bias
            w = 0.1 * z
        else:
            w = INIT_STD * z
        w = w.astype(np.float32)
        tensors[hf] = ref.BF16(ref.f32_to_bf16_bits(w)) if v["dtype"] == "BF16" else w
    ref.save_file(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{name}: {len(tensors)} tensors ({v['dtype']}), tokenizer {n_tokens} tokens, vocab_size {V}, {size} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    golden = os.path.join(here, "..", "..", "tests", "golden")
    ap.add_argument("--out", default=os.path.join(golden, "tiny_hf"))
    ap.add_argument("--variants-only", action="store_true",
                    help="write only tiny_qwen2 and tiny_llama3 (next to --out's folder), not tiny_hf")
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    for name in VARIANTS:
        write_variant(os.path.join(os.path.dirname(out), name), name)
    if args.variants_only:
        return
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        with open(train_tokenizer(tmp), "rb") as f:
            model_bytes = f.read()
    with open(os.path.join(out, "tokenizer.model"), "wb") as f:
        f.write(model_bytes)
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)

    cfg = ref.LlamaConfig(hidden_size=64, intermediate_size=176, num_attention_heads=4,
                          num_key_value_heads=2, num_hidden_layers=2, vocab_size=sp.get_piece_size(),
                          rms_norm_eps=1e-5, max_position_embeddings=256)
    init = ref.init_params(cfg, SEED, std=INIT_STD)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg.to_hf_json(), f, indent=2)
        f.write("\n")
    ref.save_file(os.path.join(out, "model.safetensors"), init, {"format": "pt"})

    params = ref.to_torch(init, torch.float64, requires_grad=False)
    cases = [greedy_case(params, cfg, sp, p) for p in PROMPTS]
    expected = dict(cases[0])
    expected["cases"] = cases
    expected["note"] = ("greedy_ids: argmax of float64 logits, full recompute over prompt_ids + generated; "
                        "top2_logit_margins: top-1 minus top-2 logit at each step")
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2, ensure_ascii=False)
        f.write("\n")
    for c in cases:
        print(f"{c['prompt']!r} -> {c['greedy_text']!r}  ({len(set(c['greedy_ids']))} distinct ids, "
              f"min margin {min(c['top2_logit_margins']):.4f})")
    print(f"vocab {cfg.vocab_size}, {sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))} bytes")


if __name__ == "__main__":
    main()
