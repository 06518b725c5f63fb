"""Writes tests/golden/chat/tiny_chat_bpe.model: a 600-piece SentencePiece BPE model (byte fallback,
identity normalization, bos 1, eos 2) whose user-defined symbols are the special tokens of the Llama 3
and ChatML chat templates, so the chat tests can check masks of those templates with a small
tokenizer. Trained on synthetic English and Chinese from a fixed seed.
    /usr/bin/python3 tools/reference/make_chat_tokenizer.py
"""
import io
import random

import sentencepiece as spm

WORDS = ("the a of to and in is it you that he was for on are with as his they be at one have this from or had by "
         "word but what some we can out other were all there when up use your how said an each she which do their "
         "time if will way about many then them write would like so these her long make thing see him two has look "
         "more day could go come did number sound no most people my over know water than call first who may down "
         "side been now find any new work part take get place made live where after back little only round man year "
         "came show every good me give our under name very through just form sentence great think say help low line "
         "differ turn cause much mean before move right boy old too same tell does set three want air well also play "
         "small end put home read hand port large spell add even land here must big high such follow act why ask men "
         "change went light kind off need house picture try us again animal point mother world near build self earth "
         "father capital france paris italy rome colour sky blue grass green snow white answer question").split()
CHINESE = "北京是中国的首都它有三千多年历史请用中文介绍一下你好世界乐于助人助手全角空格"
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
            "<|im_start|>", "<|im_end|>"]


def main():
    random.seed(0)
    lines = []
    for _ in range(3000):
        s = " ".join(random.choice(WORDS) for _ in range(random.randint(3, 12)))
        if random.random() < 0.3:
            s += " " + "".join(random.choice(CHINESE) for _ in range(random.randint(2, 6)))
        if random.random() < 0.3:
            s = s.capitalize() + random.choice([".", "?", "!", ":", ","])
        lines.append(s)
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=600, model_type="bpe",
                                   byte_fallback=True, normalization_rule_name="identity", user_defined_symbols=SPECIALS,
                                   character_coverage=1.0, add_dummy_prefix=True, remove_extra_whitespaces=False,
                                   bos_id=1, eos_id=2, unk_id=0, pad_id=-1, minloglevel=2)
    with open("tests/golden/chat/tiny_chat_bpe.model", "wb") as f:
        f.write(out.getvalue())


if __name__ == "__main__":
    main()
