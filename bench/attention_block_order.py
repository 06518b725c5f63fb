#!/usr/bin/env python3
"""The tensor-core attention kernels' block order, in a list-scheduling model: blocks start in the order
of their index on the first free slot (2 or 4 blocks a multiprocessor, 132 multiprocessors), and a block
takes as long as the tiles it walks under the causal mask. Prints how far after the ideal (the work
spread evenly) the last block ends, for the (tile, head, sequence) grid's order and for the order the
kernels use (src/kernels/cuda/flash_attention.cu, heaviest_first: heads and sequences fastest, the
heaviest tiles first). A model only: it knows nothing of the memory system or the tail of one block.
Usage: python3 bench/attention_block_order.py"""
import heapq


def makespan(works, slots):
    free = [0] * slots
    end = 0
    for w in works:
        t = heapq.heappop(free) + w
        end = max(end, t)
        heapq.heappush(free, t)
    return end


SMS = 132
# name, T, heads (of the kernel's grid), sequences, blocks per multiprocessor (registers and shared memory)
# name, T, heads (of the kernel's grid), sequences, blocks a multiprocessor holds (by ptxas's register
# counts for sm_90a: 128 threads a block, 65,536 registers a multiprocessor), which tiles are heavy
SHAPES = [
    ("Llama-2-7B seq 4096, forward (32 heads of 128; 212 registers)", 4096, 32, 1, 2, "query"),
    ("Llama-2-7B seq 4096, dq (240 registers)", 4096, 32, 1, 2, "query"),
    ("Llama-2-7B seq 4096, dk/dv (240 registers)", 4096, 32, 1, 2, "key"),
    ("TinyLlama seq 2048 x 8, forward (32 heads of 64; 128 registers)", 2048, 32, 8, 4, "query"),
    ("TinyLlama seq 2048 x 8, dq (168 registers)", 2048, 32, 8, 3, "query"),
    ("TinyLlama seq 2048 x 8, dk/dv (4 kv heads, groups of 8; 128 registers)", 2048, 4, 8, 4, "key"),
]
print("| kernel, shape | (tile, head, sequence) order | heaviest first |")
print("|---|---|---|")
for name, T, heads, seqs, per_sm, kind in SHAPES:
    tiles = T // 64
    # query tile i walks i + 1 key tiles of 64; key tile j sees (T - 64 j) / 32 query tiles of 32
    work = (lambda i: i + 1) if kind == "query" else (lambda j: (T - 64 * j) // 32)
    grid = [work(i) for s in range(seqs) for h in range(heads) for i in range(tiles)]
    order = sorted(range(tiles), key=lambda i: -work(i))
    heaviest = [work(i) for i in order for s in range(seqs) for h in range(heads)]
    ideal = sum(grid) / (SMS * per_sm)
    a, b = makespan(grid, SMS * per_sm), makespan(heaviest, SMS * per_sm)
    print(f"| {name} | {a / ideal:.3f} of the ideal | {b / ideal:.3f} (-{100 * (1 - b / a):.1f}%) |")
