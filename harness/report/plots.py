"""A sweep's table as a PNG: our time, speed-up and accuracy against the swept value with the
published figures beside them (or the two-axis plot of d2l 12.6's exercises)."""

from __future__ import annotations

from pathlib import Path

from harness.report.contention import NOT_JUDGED, rests_on_contention


def plot(report, path: Path, width_px: int | None = None) -> Path:
    """Our time, speed-up and accuracy against the swept value, the book's beside them; `width_px`
    scales the image to a width (the MLflow UI crops a wider one in an experiment's description)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = report.table
    spec = report.spec
    x = spec.report.get("x", list(spec.grid)[0])
    if spec.report.get("plot") == "twin":
        return _twin_plot(report, x, path, width_px)
    time = spec.report.get("time", "train_time_s")
    # Panels: [ours, published or "", title]; the sweep file may name its own.
    panels = spec.report.get("plots") or [
        [time, "", "our training time (s)" if time == "train_time_s" else f"our {time}"],
        ["speedup", "book_speedup", "speed-up over baseline"],
        ["test_accuracy", "book_test_accuracy", "test accuracy"]]
    panels = [p for p in panels if p[0] in t or (p[1] and p[1] in t)] or panels[:1]
    # One line per combination of the other axes (e.g. per model when x is the execution mode).
    series = spec.report.get("series")  # the axis whose values get a line each (backend, lr_scaling)
    others = [series] if series else [a for a in spec.axes() if a != x and a in t]
    lines = list(t.groupby(others, sort=False)) if others else [((), t)]
    fig, axes = plt.subplots(1, len(panels), figsize=(14 if len(panels) == 3 else 4.7 * len(panels), 4),
                             squeeze=False)
    for ax, (ours, book, title) in zip(axes[0], panels):
        for key, part in lines:
            suffix = "" if not others else " " + " ".join(map(str, key if isinstance(key, tuple) else (key,)))
            if ours in part:
                trusted, contended = _split_contended(part, ours)
                ax.plot(_x(trusted, x), trusted[ours], "o-", label=f"ours ({report.scale}){suffix}")
                if contended[ours].notna().any():
                    _draw_contended(ax, contended, x, ours, trusted[ours].max(), suffix)
            if book and book in part and part[book].notna().any():
                ax.plot(part[x].astype(str) if part[x].dtype == object else part[x], part[book], "s--",
                        label=f"published{suffix}")
        ax.set_xlabel(x)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(report.spec.title)
    return _save(fig, path, width_px)


def _x(part, x: str):
    return part[x].astype(str) if part[x].dtype == object else part[x]


def _draw_contended(ax, contended, x: str, column: str, top: float, suffix: str) -> None:
    """Figures resting on contended times as red crosses; one far above the measured line (a starved
    cell's 229 s beside 16 s) is drawn at 1.5x the line's highest point with its value written beside
    it, so it does not flatten the line it is no part of."""
    ceiling = 1.5 * top if top == top and top > 0 else None   # top != top: the line has no point
    drawn = contended[column] if ceiling is None else contended[column].clip(upper=ceiling)
    ax.plot(_x(contended, x), drawn, "X", color="tab:red", markersize=9, label=f"{NOT_JUDGED}{suffix}")
    for at, real, shown in zip(_x(contended, x), contended[column], drawn):
        if real > shown:
            ax.annotate(f"{real:.3g} (off scale)", (at, shown), textcoords="offset points", xytext=(-8, -4),
                        ha="right", va="top", color="tab:red", fontsize=8)


def _split_contended(part, column: str):
    """The rows to draw as the line, and those whose figure rests on a time taken under contention
    (harness/report/contention.py), drawn apart as red crosses: it measures the contention as much
    as the setting."""
    marked = rests_on_contention(part, column)
    return part[~marked], part[marked]


def _save(fig, path: Path, width_px: int | None) -> Path:
    import matplotlib.pyplot as plt

    dpi = 110
    if width_px:  # narrower panels at a lower resolution, so the labels stay readable
        dpi = 80
        fig.set_size_inches(width_px / dpi, fig.get_size_inches()[1])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _twin_plot(report, x: str, path: Path, width_px: int | None = None) -> Path:
    """Accuracy and time against the swept value on two y-axes (d2l 12.6's exercise plots)."""
    import matplotlib.pyplot as plt

    t = report.table.dropna(subset=["train_time_s"]).sort_values(x)
    fig, left = plt.subplots(figsize=(7, 4))
    right = left.twinx()
    left.plot(t[x], t["test_accuracy"], "o-", color="tab:blue", label="test accuracy")
    # d2l's seconds per epoch are a mean over the epochs (its Timer.avg()); older runs logged only the median
    time_column = next(c for c in ("epoch_time_mean_s", "epoch_time_median_s", "train_time_s")
                       if c in t and t[c].notna().any())
    right.plot(t[x], t[time_column], "s--", color="tab:red", label=time_column)
    left.set_xlabel(x)
    left.set_ylabel("test accuracy", color="tab:blue")
    right.set_ylabel(f"{time_column} (s)", color="tab:red")
    left.grid(alpha=0.3)
    fig.suptitle(f"{report.spec.title} ({report.scale})")
    return _save(fig, path, width_px)
