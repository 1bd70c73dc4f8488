"""Faults a new user met on a busy machine, each reproduced for real: the answer is one sentence
and the status a user's mistake gets (2), or the work goes on where the fault was only the
machine being slow."""

from __future__ import annotations

from pathlib import Path

from harness.cli import main


def one_sentence(capsys, argv: list[str], code: int, *words: str) -> str:
    capsys.readouterr()
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [shown for line in err.split("\n") if (shown := line.split("\r")[-1]).strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: ") and "Traceback" not in err, err[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def image_folder(root: Path, per_class: int = 2) -> Path:
    """root/{train,test}/{a,b}/ with `per_class` small PNGs each."""
    from PIL import Image

    for index, name in enumerate("ab"):
        for split in ("train", "test"):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.new("RGB", (8, 8), (40 * index, 10 * i, 0)).save(folder / f"{i}.png")
    return root


def test_a_dangling_symlink_among_the_images_is_a_mistake_named_with_status_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("harness.folders.CACHE_DIR", tmp_path / "cache")
    root = image_folder(tmp_path / "images")
    link = root / "train" / "a" / "gone.png"
    link.symlink_to(tmp_path / "no-such-file.png")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    one_sentence(capsys, ["run", "pruning", "--set", "model=tiny_cnn", "--set", "dataset=imagefolder",
                          "--set", f"data_dir={root}", "--set", "epochs=1", "--set", "pruning_backend=torch-pruning",
                          "--tracking-uri", uri], 2, str(link), "a link to nothing")
