"""Client and server models of DPZV (fedrepro.models.vfl)."""

import pytest
import torch

from fedrepro.models import build_model


def test_client_models_map_slices_to_embeddings():
    torch.manual_seed(0)
    assert build_model("vfl_mnist_cnn", embed_dim=16)(torch.randn(5, 1, 4, 28)).shape == (5, 16)
    assert build_model("vfl_cifar_cnn", embed_dim=16)(torch.randn(5, 3, 16, 16)).shape == (5, 16)
    text = build_model("vfl_text_encoder", vocab_size=50, embed_dim=8, hidden=16, layers=1, heads=2, intermediate=32)
    assert text(torch.randint(1, 50, (5, 12))).shape == (5, 8)


def test_server_head_has_no_relu_on_logits():
    head = build_model("vfl_server", in_features=12, num_classes=3, hidden=8)
    assert isinstance(head[-1], torch.nn.Linear) and isinstance(head[1], torch.nn.ReLU)
    assert (head(torch.randn(64, 12)) < 0).any()


def test_resnet18_client_has_no_training_mode_batchnorm():
    net = build_model("vfl_resnet18", embed_dim=8, in_channels=1)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    assert net(torch.randn(2, 1, 16, 16)).shape == (2, 8)
    with pytest.raises(ValueError, match="norm"):
        build_model("vfl_resnet18", norm="batch")


def test_text_encoder_is_per_sample():
    torch.manual_seed(0)
    net = build_model("vfl_text_encoder", vocab_size=50, embed_dim=8, hidden=16, layers=1, heads=2, intermediate=32)
    x = torch.randint(1, 50, (4, 10))
    y = x.clone()
    y[3] = torch.randint(1, 50, (10,))
    assert torch.allclose(net(x)[:3], net(y)[:3], atol=1e-6)


def test_pretrained_bert_needs_a_staged_directory(tmp_path):
    with pytest.raises((ImportError, FileNotFoundError), match="pretrained_dir|transformers"):
        build_model("vfl_text_encoder", pretrained_dir=str(tmp_path))
