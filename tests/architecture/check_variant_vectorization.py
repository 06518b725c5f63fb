#!/usr/bin/env python3
"""Every loop GCC vectorizes in the avx512 variant of the CPU kernels, it also vectorizes in the avx2
variant: an AVX2-only CPU must not run a loop one element at a time that AVX-512 runs sixteen at a
time. The loops differ when a loop body does something AVX2 cannot do lane by lane: a conditional
floating-point operation (AVX-512 masks it; AVX2, without masked arithmetic, cannot execute it for
every lane under -ftrapping-math), for one. Recompiles each variant source of compile_commands.json
with -fopt-info-vec-optimized (output discarded) for both variants and compares the source locations
of the vectorized loops.

Usage: check_variant_vectorization.py BUILD_DIR
Exit 0: every avx512 loop is vectorized in avx2 too; 1: some are not (listed); 77: no such pair of
variants in this build.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

VARIANT_DIR = re.compile(r"llamatrain_kernels_cpu_(avx2|avx512)\.dir")
VECTORIZED = re.compile(r"^(.*?:\d+:\d+): optimized: loop vectorized")


def vectorized_loops(entry, scratch):
    """The source locations of the loops the compile of entry vectorizes."""
    report = os.path.join(scratch, "vec.txt")
    if os.path.exists(report):
        os.remove(report)
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = args.index("-o")
    args = args[:out] + [f"-fopt-info-vec-optimized={report}", "-o", os.devnull] + args[out + 2 :]
    subprocess.run(args, cwd=entry["directory"], check=True, stdout=subprocess.DEVNULL)
    with open(report) as f:
        return {m.group(1) for m in map(VECTORIZED.match, f) if m}


def main():
    build = sys.argv[1]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    sources = {}  # file -> {variant: entry}
    for e in entries:
        m = VARIANT_DIR.search(e.get("command", " ".join(e.get("arguments", []))))
        if m:
            sources.setdefault(e["file"], {})[m.group(1)] = e
    pairs = {f: v for f, v in sources.items() if len(v) == 2}
    if not pairs:
        print("no avx2 and avx512 variants in this build: nothing to compare")
        return 77
    missing = set()  # a header's loop compiled into several sources is named once
    total = 0
    with tempfile.TemporaryDirectory() as scratch:
        for f in sorted(pairs):
            wide = vectorized_loops(pairs[f]["avx512"], scratch)
            narrow = vectorized_loops(pairs[f]["avx2"], scratch)
            total += len(wide)
            missing |= wide - narrow
    for loc in sorted(missing):
        print(f"vectorized in the avx512 variant but not in avx2: {loc}")
    if missing:
        print("hint: compile the file with -fopt-info-vec-missed for the avx2 variant to see why; "
              "'control flow in loop' is a conditional operation that must become a select of values")
        return 1
    print(f"{len(pairs)} sources, {total} loops vectorized for AVX-512, every one also for AVX2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
