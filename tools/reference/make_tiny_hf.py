#!/usr/bin/python3
"""Writes tests/golden/tiny_hf/: a tiny random Llama in Hugging Face layout with a real tokenizer.

Files: config.json, model.safetensors (F32, HF names), tokenizer.model (trained here with Debian's
spm_train on the built-in text below, with Llama 2's settings: BPE, byte_fallback, unk/bos/eos 0/1/2,
no pad, identity normalizer, dummy prefix), expected.json (prompt ids from python3-sentencepiece with
BOS first, 20 greedy tokens by full recompute in float64, decoded text, top-2 logit margins).
Usage: /usr/bin/python3 tools/reference/make_tiny_hf.py [--out tests/golden/tiny_hf]
"""
import argparse
import json
import os
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "golden", "tiny_hf"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)
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
