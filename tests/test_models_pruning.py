import torch
import pytest
from torch import nn

from harness.training.models import build_model, count_parameters
from harness.training.pruning import nni_compat, prune_conv_filters


def test_book_cnn_has_the_published_parameter_count():
    model = build_model("cnn")
    assert count_parameters(model) == 2_122_186
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("backend", ["nni", "torch-pruning"])
def test_half_the_conv_filters_leave_the_books_exact_count(backend):
    torch.manual_seed(0)
    model = build_model("cnn")
    prune_conv_filters(model, 0.5, torch.rand(8, 3, 32, 32), backend)
    assert count_parameters(model) == 1_059_306
    assert (model.layer1[0].out_channels, model.layer2[0].out_channels, model.fc1.in_features) == (16, 32, 2048)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("sparsity", [0.1, 0.3, 0.8])
def test_both_backends_keep_the_same_filters(sparsity):
    """Same architecture and the same surviving weights: both rank filters by L1 norm."""
    torch.manual_seed(1)
    original = build_model("cnn")
    pruned = {}
    for backend in ("nni", "torch-pruning"):
        model = build_model("cnn")
        model.load_state_dict(original.state_dict())
        pruned[backend] = prune_conv_filters(model, sparsity, torch.rand(4, 3, 32, 32), backend)
    a, b = pruned["nni"], pruned["torch-pruning"]
    assert count_parameters(a) == count_parameters(b)
    w = original.layer1[0].weight
    n_keep = w.shape[0] - int(w.shape[0] * sparsity)
    top = w.abs().sum(dim=(1, 2, 3)).topk(n_keep).indices.sort().values
    assert torch.equal(a.layer1[0].weight, w[top]) and torch.equal(b.layer1[0].weight, w[top])
    x = torch.rand(3, 3, 32, 32)
    assert torch.allclose(a(x), b(x), atol=1e-5)


def test_zero_sparsity_leaves_the_model_untouched():
    model = build_model("cnn")
    assert prune_conv_filters(model, 0.0, torch.rand(2, 3, 32, 32), "nni") is model
    assert count_parameters(model) == 2_122_186


def test_linear_layers_keep_their_outputs():
    model = prune_conv_filters(build_model("cnn"), 0.7, torch.rand(2, 3, 32, 32), "torch-pruning")
    assert (model.fc1.out_features, model.fc2.out_features) == (512, 10)


def test_nni_compat_patch():
    nni_compat.apply()
    from nni.common.concrete_trace_utils import concrete_tracer

    table = concrete_tracer.ConcreteTracer.default_autowrap_leaf_function
    assert not [f for f in table if hasattr(f, "__qualname__") and getattr(f, "__module__", "") is None]
    assert nni_compat.apply() == []  # idempotent
    graph = torch.fx.symbolic_trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    node = next(iter(graph.graph.nodes))
    # torch 2.14 calls is_impure(impure_random); NNI's wrapper took only the node.
    assert concrete_tracer.node_is_impure_wrapper(node, True) is True


def test_every_registered_model_builds_and_takes_its_input():
    from harness.training.models import MODELS

    for name, spec in MODELS.items():
        if name == "efficientnet_b7":
            continue  # 64M parameters: a second of build time for nothing B0 does not check
        model = build_model(name)
        out = model(torch.rand(2, *spec.input_shape))
        assert out.shape[0] == 2, name


def test_d2l_resnet18_shape():
    from harness.training.models import resnet18_d2l

    net = resnet18_d2l()
    assert net(torch.rand(2, 1, 28, 28)).shape == (2, 10)
    assert net[0][0].kernel_size == (3, 3) and not any(isinstance(m, nn.MaxPool2d) for m in net.modules())
