"""d2l 12.3's exercises 2, 3 and 5 (the notes in seeds/001_*), as cases of the autoparallel experiment.
d2l gives no figures for them: each sweep states the expected outcome as its checks.

- small_ops (exercise 2, "when one operator's work is small enough, parallelism helps even on one
  device"): autopar_steps independent products of autopar_size-square matrices on one stream, then
  spread round-robin over autopar_streams streams of the same GPU. A small product leaves most of
  the GPU idle, so kernels on other streams can fill it: `stream_gain` > 1; a large one fills the GPU
  alone, and the gain falls to about 1.
- cpu_gpu (exercise 3, "compute and communicate on the CPU and the GPU at once"): the GPU's products,
  their copies to the host (autopar_host_memory, the same memory for both runs) and autopar_steps
  products of autopar_cpu_size-square matrices on the CPU, first one after the other, then all at
  once (the CPU's in a thread; torch releases the GIL in a matmul).
- dependencies (exercise 5, "more complex data dependencies: faster, and still correct?"): two
  branches per stage (a = tanh(a @ w1), b = tanh(b @ w2)) joined by a step that needs both
  (a, b = a + b, a - b), autopar_steps stages; on one stream, then with each branch on its own stream
  and events for the joins. `max_abs_diff` between the two results says whether the dependencies
  were kept; `results_match` 1 when it is within float rounding.
"""

from __future__ import annotations

import threading

import torch

from experiments.overlap import hidden_share, host_copies, median_time, products, products_copied_meanwhile
from harness.fields.config import RunConfig

MATCH_TOLERANCE = 1e-5  # relative to the largest value: float rounding, not a lost dependency


def small_ops(cfg: RunConfig) -> dict[str, float]:
    g = torch.device("cuda", 0)
    x = torch.randn(cfg.autopar_size, cfg.autopar_size, device=g)
    streams = [torch.cuda.Stream(g) for _ in range(cfg.autopar_streams)]

    def spread_over_streams():
        main = torch.cuda.current_stream(g)
        for s in streams:
            s.wait_stream(main)
        for i in range(cfg.autopar_steps):
            with torch.cuda.stream(streams[i % len(streams)]):
                x.mm(x)
        for s in streams:
            main.wait_stream(s)

    one = median_time(lambda: products(x, cfg.autopar_steps), [g], cfg.epochs)
    spread = median_time(spread_over_streams, [g], cfg.epochs)
    return {"one_stream_time_s": one, "streams_time_s": spread, "train_time_s": spread, "stream_gain": one / spread}


def cpu_gpu(cfg: RunConfig) -> dict[str, float]:
    g = torch.device("cuda", 0)
    n, steps = cfg.autopar_size, cfg.autopar_steps
    x = torch.randn(n, n, device=g)
    h = torch.randn(cfg.autopar_cpu_size, cfg.autopar_cpu_size)
    baseline_copy, overlapped_copy = host_copies(cfg.autopar_host_memory, n, steps)
    copier = torch.cuda.Stream(g)

    compute = median_time(lambda: products(x, steps), [g], cfg.epochs)
    results = products(x, steps)
    copy = median_time(lambda: [baseline_copy(i, y) for i, y in enumerate(results)], [g], cfg.epochs)
    del results
    cpu = median_time(lambda: products(h, steps), [g], cfg.epochs)

    def all_at_once():
        on_cpu = threading.Thread(target=products, args=(h, steps))
        on_cpu.start()
        products_copied_meanwhile(x, steps, overlapped_copy, copier)
        on_cpu.join()

    both = median_time(all_at_once, [g], cfg.epochs)
    parts = [compute, copy, cpu]
    return {"compute_time_s": compute, "copy_time_s": copy, "cpu_compute_time_s": cpu, "serial_time_s": sum(parts),
            "overlapped_time_s": both, "train_time_s": both, "overlap_gain": sum(parts) / both,
            "overlap_hidden_share": hidden_share(parts, both)}


def dependencies(cfg: RunConfig) -> dict[str, float]:
    g = torch.device("cuda", 0)
    n, steps = cfg.autopar_size, cfg.autopar_steps
    w1, w2 = (torch.randn(n, n, device=g) / n ** 0.5 for _ in range(2))
    start = torch.randn(n, n, device=g)
    left, right = torch.cuda.Stream(g), torch.cuda.Stream(g)

    def one_stream():
        a = b = start
        for _ in range(steps):
            a, b = torch.tanh(a @ w1), torch.tanh(b @ w2)
            a, b = a + b, a - b
        return a, b

    def two_streams():
        main = torch.cuda.current_stream(g)
        left.wait_stream(main)
        right.wait_stream(main)
        a = b = start
        for _ in range(steps):
            with torch.cuda.stream(left):
                a = torch.tanh(a @ w1)
            with torch.cuda.stream(right):
                b = torch.tanh(b @ w2)
            left.wait_stream(right)            # the join needs both branches
            b.record_stream(left)
            with torch.cuda.stream(left):
                a, b = a + b, a - b
            right.wait_stream(left)            # the next right branch reads the join's b
            b.record_stream(right)
        main.wait_stream(left)
        return a, b

    serial = median_time(one_stream, [g], cfg.epochs)
    parallel = median_time(two_streams, [g], cfg.epochs)
    expected, got = one_stream(), two_streams()
    torch.cuda.synchronize(g)
    scale = max(float(t.abs().max()) for t in expected) or 1.0
    diff = max(float((e - r).abs().max()) for e, r in zip(expected, got))
    return {"serial_time_s": serial, "parallel_time_s": parallel, "train_time_s": parallel,
            "dependency_gain": serial / parallel, "max_abs_diff": diff,
            "results_match": float(diff <= MATCH_TOLERANCE * scale)}
