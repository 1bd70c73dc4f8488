"""D12.1 (d2l 12.1, "hybridize"): is a compiled model faster per forward call than the eager one?

d2l times 1000 forward passes of a small MLP on one `randn(1, 512)` input, eager and after
`torch.jit.script` (about 20% faster there), and shows that the scripted model saved with `.save`
loads with `torch.jit.load` without its Python class. `torch.jit.script` is deprecated in current
PyTorch; `torch.compile`, its successor, runs beside it.

    harness run hybridize --set model=mlp_d2l --set batch_size=1 --set execution=script

Each cell: build the model (seeded), make the `execution` variant, time its first call (for
`compile` that is the compilation), check its output against eager, run `warmup_calls` untimed
calls, then `timing_repeats` times the clock around `forward_calls` calls. The scripted model is
saved and reloaded through `torch.jit.load` and the reloaded one is the one timed and checked.

`execution=eager|script|compile`; `compile_mode` and `compile_backend` (inductor by default) shape
the compiled one. `per_call_us` is the median over the repeats, with its IQR; `first_call_s` the
first call; `max_abs_diff_vs_eager` the largest difference from eager's output (a mismatch fails
the cell). Warnings raised while scripting or compiling (the jit deprecation notice) are kept in the
tag `harness.note.captured_warnings`, not printed. The report's speed-up is over the same model's
eager run (`forward_calls`, default 1000, calls on one fixed input per repeat).

On CUDA, the compile modes that capture CUDA graphs (reduce-overhead, max-autotune) run the whole
cell under torch.no_grad(): a forward with autograd on keeps its graph for a backward that never
comes, and CUDA graphs would not be what is timed. `autograd_on` (1/0) says which a cell did.
Inductor needs a C++ compiler on CPU and, on CUDA, Triton and a C compiler for Triton's launcher;
without them the cell is a skip with the reason.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from experiments.descriptors.hybridize import HybridizeConfig
from harness.errors import CellSkipped
from harness.training.models import MODELS, build_model
from harness.training.timing import spread, timed
from harness.training.train import EpochCallback, prepare

__all__ = ["HybridizeConfig", "run", "make_variant", "captured_warnings"]
# torch.compile modes that capture CUDA graphs on a GPU (max-autotune-no-cudagraphs does not).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")

log = logging.getLogger(__name__)

# Outputs of a compiled or scripted model may differ from eager by float rounding only.
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def run(cfg: HybridizeConfig, on_epoch: EpochCallback | None = None) -> dict[str, float | str]:
    device = prepare(cfg)
    spec = MODELS[cfg.model]
    model = build_model(cfg.model, 2 if cfg.model == "mlp_d2l" else 10).to(device).eval()
    x = torch.randn(cfg.batch_size, *spec.input_shape, generator=torch.Generator().manual_seed(cfg.seed)).to(device)
    with torch.no_grad():
        expected = model(x)

    autograd = not cuda_graphs(cfg.execution, cfg.compile_mode, device)
    with torch.set_grad_enabled(autograd):
        with tempfile.TemporaryDirectory(prefix="hybridize-") as folder, captured_warnings() as captured:
            variant = make_variant(model, cfg.execution, Path(folder), cfg.compile_mode, cfg.compile_backend)
            with timed(device) as first:  # for torch.compile: tracing and code generation happen here
                out = variant(x)
        # Read before the next call: a CUDA graph's output is overwritten by its next replay.
        max_diff = (out.detach().float() - expected.float()).abs().max().item()
        torch.testing.assert_close(out.detach(), expected, **TOLERANCE,
                                   msg=lambda m: f"{cfg.execution} output differs from eager: {m}")

        for _ in range(cfg.warmup_calls):
            variant(x)
        times = []
        for _ in range(cfg.timing_repeats):
            with timed(device) as clock:
                for _ in range(cfg.forward_calls):
                    variant(x)
            times.append(clock.seconds)
    t = spread(times)
    notes = {"captured_warnings": " | ".join(captured)} if captured else {}
    return {
        "forward_time_s": t["median"],              # forward_calls calls, median of the repeats
        "forward_time_iqr_s": t["iqr"],
        "per_call_us": 1e6 * t["median"] / cfg.forward_calls,
        "per_call_iqr_us": 1e6 * t["iqr"] / cfg.forward_calls,
        "first_call_s": first.seconds,
        "max_abs_diff_vs_eager": max_diff,
        "warnings_captured": float(len(captured)),
        "autograd_on": float(autograd),
        **notes,
    }


def cuda_graphs(execution: str, compile_mode: str, device: torch.device) -> bool:
    """Whether this variant replays CUDA graphs (and so must be timed under no_grad)."""
    return execution == "compile" and device.type == "cuda" and compile_mode in CUDA_GRAPH_MODES


def inductor_problem(device_type: str) -> str | None:
    """Why torch.compile's inductor backend cannot generate code for `device_type` here, or None."""
    if device_type == "cpu" and not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        return "torch.compile's inductor backend needs a C++ compiler on CPU and none is on PATH"
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            return "torch.compile's inductor backend needs Triton on CUDA and it is not installed (or too old for this GPU)"
        compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
        if not compiler or not shutil.which(compiler):
            return ("torch.compile's inductor backend on CUDA needs a C compiler for Triton's launcher "
                    "(CC, gcc or clang) and none is on PATH")
    return None


@contextmanager
def captured_warnings():
    """Collect the warnings raised inside (torch.jit.script's deprecation notice among them) as
    text, and log them at INFO instead of printing them: a sweep's output stays readable and the
    notice is kept with the run (the `harness.note.captured_warnings` tag)."""
    texts: list[str] = []
    # torch also writes warnings through its own loggers (inductor looking for a CUDA toolkit, ...).
    torch_log = logging.getLogger("torch")
    handler = _Collect()
    saved = torch_log.handlers[:], torch_log.propagate
    torch_log.handlers, torch_log.propagate = [handler], False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield texts
        finally:
            torch_log.handlers, torch_log.propagate = saved
            texts.extend(f"{w.category.__name__}: {w.message}" for w in caught)
            texts.extend(handler.texts)
            for text in texts:
                log.info("captured: %s", text)


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(f"{record.name}: {record.getMessage()}")


def make_variant(model: nn.Module, execution: str, folder: Path, compile_mode: str = "default",
                 compile_backend: str = "inductor") -> nn.Module:
    """The model as `execution` asks: itself, scripted then saved and reloaded from `folder`, or compiled."""
    if execution == "eager":
        return model
    if execution == "script":
        scripted = torch.jit.script(model)
        path = folder / "scripted.pt"
        scripted.save(str(path))
        # What d2l shows: the file alone is enough, no Python class is needed to load it.
        return torch.jit.load(str(path), map_location=next(model.parameters()).device)
    if execution == "compile":
        problem = inductor_problem(next(model.parameters()).device.type) if compile_backend == "inductor" else None
        if problem:
            raise CellSkipped(problem)
        torch._dynamo.reset()  # a cold compile per cell: no graph reused from an earlier cell
        return torch.compile(model, mode=compile_mode, backend=compile_backend)
    raise ValueError(f"unknown execution '{execution}'")
