from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.training import data
from harness import folders
from harness.errors import UserError


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path / "cache")
    data._memory.clear()


def test_digits_are_real_and_scaled_to_the_models_input():
    ds = data.load_splits("digits", "unused", (3, 32, 32))
    assert (len(ds.train), len(ds.test)) == (1437, 360)
    assert ds.train.x.shape[1:] == (3, 32, 32)
    assert 0.0 <= ds.train.x.min() and ds.train.x.max() <= 1.0
    assert set(ds.train.y.tolist()) == set(range(10))


def test_synthetic_is_seeded_and_limits_set_its_size():
    a = data.load_splits("synthetic", "unused", (1, 16, 16), seed=3, train_limit=64, test_limit=32)
    data._memory.clear()
    b = data.load_splits("synthetic", "unused", (1, 16, 16), seed=3, train_limit=64, test_limit=32)
    c = data.synthetic((1, 16, 16), 64, 32, seed=4)
    assert torch.equal(a.train.x, b.train.x) and not torch.equal(a.train.x, c.train.x)
    assert (len(a.train), len(a.test)) == (64, 32)


def _write_folder(root, classes=("cat", "dog"), per_class=3, size=(8, 8)):
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 255, (*size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / c / f"{i}.png")


def test_imagefolder_decodes_once_and_caches(tmp_path):
    _write_folder(tmp_path / "imgs")
    ds = data.load_splits("imagefolder", str(tmp_path / "imgs"), (3, 8, 8))
    assert ds.train.x.shape == (6, 3, 8, 8) and ds.num_classes == 2
    assert ds.train.y.tolist() == [0, 0, 0, 1, 1, 1]
    first = Image.open(tmp_path / "imgs/train/cat/0.png")
    assert torch.allclose(ds.train.x[0], torch.tensor(np.asarray(first)).permute(2, 0, 1) / 255.0)
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2
    data._memory.clear()
    again = data.load_splits("imagefolder", str(tmp_path / "imgs"), (3, 8, 8))
    assert torch.equal(again.train.x, ds.train.x)


def test_limit_takes_a_fixed_subset_across_classes(tmp_path):
    _write_folder(tmp_path / "imgs", classes=("a", "b", "c", "d"), per_class=5)
    ds = data.load_splits("imagefolder", str(tmp_path / "imgs"), (1, 8, 8), train_limit=8)
    assert len(ds.train) == 8 and len(set(ds.train.y.tolist())) > 1  # not just the first class
    assert ds.train.x.shape[1] == 1  # RGB averaged for a one-channel model


def test_missing_folder_says_what_is_needed(tmp_path):
    with pytest.raises(UserError, match="train' and .*test'.*data_dir"):
        data.load_splits("imagefolder", str(tmp_path / "nowhere"), (3, 32, 32))


def test_offline_cifar_says_how_to_provide_it(tmp_path, monkeypatch):
    import torchvision

    class Offline:
        def __init__(self, root, train, download):
            if download:
                raise OSError("network unreachable")
            raise RuntimeError("Dataset not found or corrupted.")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", Offline)
    with pytest.raises(UserError) as err:
        data.load_splits("cifar10", str(tmp_path), (3, 32, 32))
    assert "could not be downloaded" in str(err.value) and "imagefolder" in str(err.value)


def test_batches_cover_every_sample_once_per_epoch():
    split = data.Split(torch.arange(10).float().view(10, 1, 1, 1), torch.arange(10))
    seen = torch.cat([y for _, y in data.batches(split, 3, torch.Generator().manual_seed(0))])
    assert sorted(seen.tolist()) == list(range(10))
    assert [len(y) for _, y in data.batches(split, 4, shuffle=False)] == [4, 4, 2]


def test_grey28_is_the_folder_in_grey_at_28x28_decoded_once(tmp_path):
    """The Fashion-MNIST stand-in (imagefolder_grey28): 1 x 28 x 28 in [0, 1], PIL's luma of each
    image resized to 28x28 (not the RGB mean _adapt would take), cached apart from the RGB decode."""
    _write_folder(tmp_path / "imgs", size=(32, 32))
    ds = data.load_splits("imagefolder_grey28", str(tmp_path / "imgs"), (1, 28, 28))
    assert ds.train.x.shape == (6, 1, 28, 28) and ds.test.x.shape == (6, 1, 28, 28) and ds.num_classes == 2
    assert 0.0 <= ds.train.x.min() and ds.train.x.max() <= 1.0
    with Image.open(tmp_path / "imgs/train/cat/0.png") as first:
        expected = np.asarray(first.convert("L").resize((28, 28), Image.Resampling.BILINEAR))
        rgb_mean = np.asarray(first.resize((28, 28), Image.Resampling.BILINEAR), dtype=np.float32).mean(axis=2)
    assert torch.equal(ds.train.x[0, 0], torch.tensor(expected).float() / 255.0)
    assert not np.allclose(expected, rgb_mean, atol=1.0)  # luma weighs green most: not the channel mean
    assert len(list((tmp_path / "cache").glob("imagefolder-grey28-*.pt"))) == 2
    data._memory.clear()
    again = data.load_splits("imagefolder_grey28", str(tmp_path / "imgs"), (1, 28, 28))
    assert torch.equal(again.train.x, ds.train.x)
    data._memory.clear()
    rgb = data.load_splits("imagefolder", str(tmp_path / "imgs"), (3, 32, 32))  # its own cache, still RGB
    assert rgb.train.x.shape == (6, 3, 32, 32)


def test_grey28_names_itself_when_the_folder_is_missing(tmp_path):
    with pytest.raises(UserError, match="dataset 'imagefolder_grey28' needs class folders"):
        data.load_splits("imagefolder_grey28", str(tmp_path / "nowhere"), (1, 28, 28))


def test_a_failed_download_leaves_no_folder_behind(tmp_path, monkeypatch):
    """torchvision makes data_dir before it downloads into it: offline, an empty data/ was left."""
    import torchvision

    class MakesItsFolderThenFails:
        def __init__(self, root, train, download):
            if download:
                (Path(root) / "cifar-10-batches-py").mkdir(parents=True)
                raise OSError("network unreachable")
            raise RuntimeError("Dataset not found or corrupted.")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", MakesItsFolderThenFails)
    with pytest.raises(UserError, match="could not be downloaded"):
        data.load_splits("cifar10", str(tmp_path / "data" / "cifar"), (3, 32, 32))
    assert list(tmp_path.iterdir()) == []


def test_a_downloaded_dataset_is_checked_before_torch_loads(tmp_path, monkeypatch):
    """Not in data_dir and offline: one sentence; in data_dir: no question asked of the network."""
    from harness.fields import data_folders
    from harness.fields.catalogue import DOWNLOADS

    monkeypatch.setenv(data_folders.OFFLINE_ENV, "1")
    with pytest.raises(UserError, match="dataset 'cifar10' is not in data_dir .* declared offline"):
        data_folders.check_downloadable("cifar10", str(tmp_path))
    for name in DOWNLOADS["cifar10"].files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    data_folders.check_downloadable("cifar10", str(tmp_path))   # present: offline does not matter
    monkeypatch.delenv(data_folders.OFFLINE_ENV)
    monkeypatch.setattr(data_folders, "reachable", lambda host, port: False)
    with pytest.raises(UserError, match="www.cs.toronto.edu cannot be reached"):
        data_folders.check_downloadable("cifar10", str(tmp_path / "empty"))
    monkeypatch.setattr(data_folders, "reachable", lambda host, port: True)
    data_folders.check_downloadable("cifar10", str(tmp_path / "empty"))   # online: the first cell downloads it
    assert not (tmp_path / "empty").exists()


def test_reachable_tells_a_closed_port_from_a_listening_one():
    import socket

    from harness.fields.data_folders import reachable

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert reachable("127.0.0.1", listening.getsockname()[1], timeout=2)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))   # bound, never listening: a connection is refused at once
        assert not reachable("127.0.0.1", closed.getsockname()[1], timeout=2)


def test_the_download_table_matches_torchvisions_own():
    import torchvision

    from harness.fields.catalogue import DOWNLOADS

    assert DOWNLOADS["cifar10"].url == torchvision.datasets.CIFAR10.url
    assert set(DOWNLOADS["cifar10"].files) == {f"cifar-10-batches-py/{name}" for name, _ in
                                               torchvision.datasets.CIFAR10.train_list + torchvision.datasets.CIFAR10.test_list}
    assert DOWNLOADS["fashion_mnist"].url == torchvision.datasets.FashionMNIST.mirrors[0]
    raw = {f"FashionMNIST/raw/{name.removesuffix('.gz')}" for name, _ in torchvision.datasets.FashionMNIST.resources}
    assert set(DOWNLOADS["fashion_mnist"].files) == raw
