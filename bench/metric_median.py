#!/usr/bin/env python3
"""Median of one metric over a training run's logged steps after the first two (warm-up).

Usage: /usr/bin/python3 bench/metric_median.py RUN/metrics.jsonl KEY   (prints 0 when no step has it)
The benches that launch `llamatrain train` (dp_scaling.sh, model_parallel_overhead.sh) read their
figures with it.
"""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
values = [r[sys.argv[2]] for r in rows if "loss" in r and r["step"] > 2 and r.get(sys.argv[2]) is not None]
print(statistics.median(values) if values else 0)
