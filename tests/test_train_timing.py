import torch

from experiments import make_config
from harness.training.data import load_splits
from harness.training.models import build_model
from harness.training.timing import peak_rss_mb, reset_peak_rss, spread, timed
from harness.training.train import evaluate, make_optimizer, train_epochs


def test_training_learns_the_synthetic_task_and_reports_each_epoch():
    cfg = make_config({"model": "tiny_cnn", "dataset": "synthetic", "lr": 0.01, "batch_size": 32})
    ds = load_splits("synthetic", "", (1, 16, 16), train_limit=512, test_limit=256)
    torch.manual_seed(0)
    model = build_model("tiny_cnn")
    before = evaluate(model, ds.test, batch_size=100, device=torch.device("cpu"))
    seen = []
    times = train_epochs(model, make_optimizer(cfg, model), ds.train, epochs=3, batch_size=32,
                         device=torch.device("cpu"), generator=torch.Generator().manual_seed(0),
                         on_epoch=lambda e, m: seen.append((e, m)))
    after = evaluate(model, ds.test, batch_size=100, device=torch.device("cpu"))
    assert after > 0.8 > before
    assert [e for e, _ in seen] == [0, 1, 2] and len(times) == 3
    assert seen[-1][1]["train_loss"] < seen[0][1]["train_loss"]
    assert [m["epoch_time_s"] for _, m in seen] == times


def test_spread_gives_median_and_iqr():
    s = spread([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median"] == 3.0 and s["iqr"] == 2.0 and (s["min"], s["max"]) == (1.0, 100.0)
    assert spread([5.0])["iqr"] == 0.0


def test_timed_measures_the_block():
    import time

    # Bounds that hold on a loaded machine: a sleep lasts at least as long as asked, and the
    # interval lies inside a clock read around the whole block.
    outer = time.perf_counter()
    with timed("cpu") as t:
        time.sleep(0.05)
    outer = time.perf_counter() - outer
    assert 0.05 <= t.seconds <= outer, (t.seconds, outer)


def test_peak_rss_window_sees_a_new_allocation():
    # In a fresh interpreter: inside the test session, memory earlier tests freed may still be
    # resident and take the new block without the resident size growing (seen once in CI).
    import subprocess
    import sys

    script = ("import torch\n"
              "from harness.training.timing import peak_rss_mb, reset_peak_rss\n"
              "assert reset_peak_rss()\n"
              "base = peak_rss_mb()\n"
              "block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB\n"
              "print(peak_rss_mb() - base)\n")
    grown = float(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                                 text=True).stdout)
    assert grown > 50
