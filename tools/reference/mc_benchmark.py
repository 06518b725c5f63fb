#!/usr/bin/python3
"""Multiple-choice benchmark reference: the prompts and choice log-likelihoods `llamatrain eval --task`
must reproduce (tests/cli/eval_benchmark_test.cpp), written from the published evaluation code, not
from the C++.

Files: Python's csv module on each benchmark's layout (MMLU data/{dev,test}/<s>_{dev,test}.csv without
header; C-Eval {dev,val}/<s>_{dev,val}.csv and CMMLU {dev,test}/<s>.csv read by their header names).
Prompts: lm-evaluation-harness's multiple_choice tasks (mmlu/default, ceval-valid, cmmlu): the
task's `description`, then the first k dev docs (sampler first_n) each as doc_to_text +
target_delimiter " " + the answer letter, joined and followed by fewshot_delimiter "\\n\\n", then the
doc's doc_to_text; doc_to_text is the yaml's Jinja template "{{question.strip()}}\\nA. {{A}}\\n...".
Fitting: hendrycks/test evaluate.py's loop (k lowered by one while the prompt is too long), then the
harness's left cut (inp = (context_enc + continuation_enc)[-(max_length + 1):][:-1]).
Scoring: the harness's _encode_pair (whole = encode(context + continuation); the continuation is
whole[len(encode(context)):]) with BOS in front, and its loglikelihood: each choice run on its own
(no shared prefix), the continuation's log-softmax summed, in float64 with llama_ref.

Prints one JSON object per question: subject, index, shots, context, loglik, predicted.
Usage: /usr/bin/python3 tools/reference/mc_benchmark.py mmlu --data DIR --model HF_FOLDER [--shots 5]
         [--seq 256] [--tokenizer FILE]
       /usr/bin/python3 tools/reference/mc_benchmark.py --letter-tokenizer OUT_PREFIX --corpus TEXT
         (a SentencePiece BPE model whose "▁A" .. "▁D" are single pieces: the one-pass path's fixture)
"""
import argparse
import csv
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402

LETTERS = ["A", "B", "C", "D"]

# The subject names the descriptions use (lm-eval's _generate_configs.py SUBJECTS tables), for the
# subjects the test's fixtures hold: C-Eval and CMMLU by their Chinese names, MMLU by its words.
CEVAL_ZH = {"computer_network": "计算机网络", "high_school_physics": "高中物理", "law": "法学"}
CMMLU_ZH = {"agronomy": "农学", "chinese_history": "中国历史", "high_school_physics": "高中物理学"}


def description(task, subject):
    if task == "mmlu":
        return "The following are multiple choice questions (with answers) about " + " ".join(subject.split("_")) + ".\n\n"
    if task == "ceval":
        return f"以下是中国关于{CEVAL_ZH[subject]}的单项选择题，请选出其中的正确答案。\n\n"
    return f"以下是关于{CMMLU_ZH[subject]}的单项选择题，请直接给出正确答案的选项。\n\n"


def doc_to_text(task, doc):
    tail = "\nAnswer:" if task == "mmlu" else "\n答案："
    return f"{doc['question'].strip()}\nA. {doc['A']}\nB. {doc['B']}\nC. {doc['C']}\nD. {doc['D']}{tail}"


def read_docs(task, path):
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = [r for r in csv.reader(f) if r]
    if task == "mmlu":
        return [dict(zip(["question", "A", "B", "C", "D", "answer"], r)) for r in rows]
    header = rows[0]
    q, a = ("question", "answer") if task == "ceval" else ("Question", "Answer")
    out = []
    for r in rows[1:]:
        d = dict(zip(header, r))
        out.append({"question": d[q], "A": d["A"], "B": d["B"], "C": d["C"], "D": d["D"], "answer": d[a]})
    return out


def files(task, root, subject):
    if task == "mmlu":
        return f"{root}/dev/{subject}_dev.csv", f"{root}/test/{subject}_test.csv"
    if task == "ceval":
        return f"{root}/dev/{subject}_dev.csv", f"{root}/val/{subject}_val.csv"
    return f"{root}/dev/{subject}.csv", f"{root}/test/{subject}.csv"


def subjects(task, root):
    split, suffix = {"mmlu": ("test", "_test.csv"), "ceval": ("val", "_val.csv"), "cmmlu": ("test", ".csv")}[task]
    return sorted(f[: -len(suffix)] for f in os.listdir(f"{root}/{split}") if f.endswith(suffix))


def context_for(task, subject, dev, k, doc):
    shots = [doc_to_text(task, d) + " " + d["answer"] for d in dev[:k]]
    fewshot = "\n\n".join(shots) + "\n\n" if shots else ""
    return description(task, subject) + fewshot + doc_to_text(task, doc)


class Scorer:
    def __init__(self, folder, tokenizer):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=tokenizer)
        with open(os.path.join(folder, "config.json")) as f:
            self.cfg = ref.LlamaConfig.from_hf_json(json.load(f))
        tensors, _ = ref.load_file(os.path.join(folder, "model.safetensors"))
        self.params = ref.to_torch({n: tensors[n] for n, _ in ref.param_shapes(self.cfg)}, torch.float64,
                                   requires_grad=False)

    def encode_pair(self, context, continuation):
        whole = [self.sp.bos_id()] + self.sp.encode(context + continuation)
        n = 1 + len(self.sp.encode(context))
        return whole[:n], whole[n:]

    def input_length(self, context):
        return max(sum(len(x) for x in self.encode_pair(context, " " + c)) - 1 for c in LETTERS)

    def loglik(self, context, continuation, seq):
        ctx, cont = self.encode_pair(context, continuation)
        inp = (ctx + cont)[-(seq + 1):][:-1]
        with torch.no_grad():
            logits = ref.forward(self.params, self.cfg, torch.tensor([inp], dtype=torch.long))[0]
        logp = torch.log_softmax(logits[len(inp) - len(cont):], dim=-1)
        return float(sum(logp[j, t] for j, t in enumerate(cont)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", nargs="?", choices=["mmlu", "ceval", "cmmlu"])
    ap.add_argument("--data")
    ap.add_argument("--model")
    ap.add_argument("--tokenizer")
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--letter-tokenizer")
    ap.add_argument("--corpus")
    a = ap.parse_args()
    if a.letter_tokenizer:
        import sentencepiece as spm
        spm.SentencePieceTrainer.train(input=a.corpus, model_prefix=a.letter_tokenizer, vocab_size=500,
                                       model_type="bpe", byte_fallback=True, character_coverage=0.995,
                                       user_defined_symbols=["▁A", "▁B", "▁C", "▁D"], num_threads=1,
                                       minloglevel=2)
        return
    torch.set_num_threads(1)
    root = a.data if os.path.isdir(os.path.join(a.data, "dev")) else os.path.join(a.data, "data")
    scorer = Scorer(a.model, a.tokenizer or os.path.join(a.model, "tokenizer.model"))
    for subject in subjects(a.task, root):
        dev_path, test_path = files(a.task, root, subject)
        dev = read_docs(a.task, dev_path) if a.shots > 0 else []
        for i, doc in enumerate(read_docs(a.task, test_path)):
            k = min(a.shots, len(dev))
            context = context_for(a.task, subject, dev, k, doc)
            while k > 0 and scorer.input_length(context) > a.seq:
                k -= 1
                context = context_for(a.task, subject, dev, k, doc)
            loglik = [scorer.loglik(context, " " + c, a.seq) for c in LETTERS]
            print(json.dumps({"subject": subject, "index": i, "shots": k, "context": context, "loglik": loglik,
                              "predicted": int(np.argmax(loglik)), "answer": LETTERS.index(doc["answer"])},
                             ensure_ascii=False))


if __name__ == "__main__":
    main()
