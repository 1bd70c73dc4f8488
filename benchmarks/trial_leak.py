"""What one trial leaves in a process that changes the next one's speed (the speed-recipe study's
trial 14 ran 1.8x faster after 13 earlier trials in the same process than alone).

    python benchmarks/trial_leak.py                     # every variant, 2 rounds, interleaved
    python benchmarks/trial_leak.py --rounds 3 --steps 12

Each variant is a fresh process that times `--steps` training steps of trial 14's configuration
(the book's CNN, bf16 autocast, channels_last, batch 512, Adam) on random CIFAR-shaped inputs, then
does one thing an earlier trial could have done, then times the same steps again. Its ratio
(before / after, > 1: faster after) is compared with the control's, which does nothing between:
what the control shows is warm-up, the difference is the leak. Beside the time, each phase reports
the minor page faults per step (getrusage: memory the allocator had to take from the kernel again)
and the flush-denormal state (harness.machine.process_state). The machine may be busy: rounds are
interleaved, and only a ratio far outside the control's spread means something.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

VARIANTS = {
    "control": "nothing between the two phases",
    "fp32_b512": "an fp32 eager trial at batch 512 (big tensors allocated and freed)",
    "compiled": "a torch.compile (inductor) bf16 trial at batch 128",
    "flush_denormal": "torch.set_flush_denormal(True)",
    "malloc_big_free": "one 30 MiB buffer allocated and freed (glibc raises its mmap threshold)",
    "malloc_keeps": "(whole process) glibc never mmaps nor trims: freed memory is reused, never faulted in again",
}
# Environment a variant's whole process runs with (both phases).
ENV = {"malloc_keeps": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}}


def _steps(model, optimizer, n: int, batch: int, dtype, channels_last: bool) -> dict:
    import torch

    from harness.machine.process_state import snapshot

    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for _ in range(n):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - started
    end = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (end.ru_utime + end.ru_stime) - (usage.ru_utime + usage.ru_stime)
    return {"s_per_step": seconds / n, "cpu_s_per_step": cpu / n, "sys_s_per_step": (end.ru_stime - usage.ru_stime) / n,
            "faults_per_step": (end.ru_minflt - usage.ru_minflt) / n, **snapshot()}


def _trial14(steps: int) -> dict:
    import torch

    from harness.training.models import build_model
    from harness.training.speed_methods import to_channels_last

    torch.manual_seed(0)
    model = to_channels_last(build_model("cnn", 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=8e-5, weight_decay=0.005)
    _steps(model, optimizer, 2, 512, torch.bfloat16, True)   # first-step costs (oneDNN primitives) out
    return _steps(model, optimizer, steps, 512, torch.bfloat16, True)


def _between(variant: str) -> None:
    import torch

    from harness.training.models import build_model

    if variant == "fp32_b512":
        model = build_model("cnn", 10)
        _steps(model, torch.optim.Adam(model.parameters(), lr=1e-5), 3, 512, torch.float32, False)
    elif variant == "compiled":
        model = build_model("cnn", 10)
        compiled = torch.compile(model)
        _steps(compiled, torch.optim.Adam(model.parameters(), lr=1e-5), 3, 128, torch.bfloat16, False)
    elif variant == "flush_denormal":
        torch.set_flush_denormal(True)
    elif variant == "malloc_big_free":
        buffer = torch.empty(30 << 20, dtype=torch.uint8)
        buffer.fill_(1)
        del buffer


def child(variant: str, steps: int) -> None:
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    before = _trial14(steps)
    _between(variant)
    after = _trial14(steps)
    print(json.dumps({"variant": variant, "before": before, "after": after,
                      "load": os.getloadavg()[0]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    variants = args.variants.split(",")
    print("s: wall seconds per step; cpu: this process's CPU seconds per step (user+sys; sys: the kernel's "
          "share); ratio: before/after (> 1: faster after)")
    print(f"{'round':>5} {'variant':<16} {'s before':>8} {'after':>6} {'ratio':>5} {'cpu before':>10} {'after':>6} "
          f"{'ratio':>5} {'sys before':>10} {'after':>6} {'faults/step before':>18} {'after':>7} "
          f"{'flush before/after':>18} {'load':>5}")
    for rnd in range(args.rounds):
        for variant in variants:
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--steps", str(args.steps)],
                                 capture_output=True, text=True, check=True, env={**os.environ, **ENV.get(variant, {})})
            r = json.loads(out.stdout.strip().splitlines()[-1])
            b, a = r["before"], r["after"]
            print(f"{rnd:>5} {variant:<16} {b['s_per_step']:>8.3f} {a['s_per_step']:>6.3f} "
                  f"{b['s_per_step'] / a['s_per_step']:>5.2f} {b['cpu_s_per_step']:>10.3f} {a['cpu_s_per_step']:>6.3f} "
                  f"{b['cpu_s_per_step'] / a['cpu_s_per_step']:>5.2f} {b['sys_s_per_step']:>10.3f} "
                  f"{a['sys_s_per_step']:>6.3f} {b['faults_per_step']:>18.0f} {a['faults_per_step']:>7.0f} "
                  f"{b['state_flush_denormal_pool']:>8.2f}/{a['state_flush_denormal_pool']:<9.2f} {r['load']:>5.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
