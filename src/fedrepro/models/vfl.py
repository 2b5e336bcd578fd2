"""Vertical-FL parts for DPZV: client bottom models and the server's top model.

A client model maps its feature slice to an embedding of width `embed_dim`
(attribute `model.embed_dim`). The server concatenates the M embeddings and
applies `server_head`. DPZV §7 names the client models only ("two-layer CNN",
"four-layer CNN", ResNet-18, pre-trained BERT); the layers below are this
repository's reading, each stated in its builder. Every client model is per-sample:
no BatchNorm in training mode and no dropout, because DPZV's per-sample clipping
(§4) and its lambda = 1e-3 finite differences (Table 3) need each sample's output
to depend on that sample and the parameters only.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
from torch import nn

NORMS = ("group", "frozen_bn")


class _Client(nn.Module):
    def __init__(self, body: nn.Module, embed_dim: int):
        super().__init__()
        self.body = body
        self.embed_dim = embed_dim

    def forward(self, x):
        return self.body(x)


def mnist_client_cnn(
    in_channels: int = 1, embed_dim: int = 64, width: int = 16, pool: tuple[int, int] | list[int] = (2, 7)
) -> nn.Module:
    """MNIST "two-layer CNN" (DPZV §7) on a 1x4x28 row strip, read as two convs and one linear layer.

    Conv(1,16,3,p1)-ReLU-Conv(16,32,3,p1)-ReLU-AdaptiveAvgPool(pool)-Flatten-Linear(32*prod(pool), e).
    `pool` (2, 7) for MNIST strips; any strip size works (adaptive pooling).
    """
    pool = tuple(int(p) for p in pool)
    body = nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(pool),
        nn.Flatten(),
        nn.Linear(2 * width * pool[0] * pool[1], embed_dim),
    )
    return _Client(body, embed_dim)


def cifar_client_cnn(in_channels: int = 3, embed_dim: int = 64, width: int = 32, input_size: int = 16) -> nn.Module:
    """CIFAR "four-layer CNN" (DPZV §7) on a 3x16x16 patch: three 3x3 convs and one linear layer.

    Conv(3,w)-ReLU-Conv(w,2w)-ReLU-MaxPool2-Conv(2w,4w)-ReLU-MaxPool2-Flatten-Linear(4w*(s/4)^2, e).
    """
    if input_size % 4:
        raise ValueError(f"cifar_client_cnn input_size must be divisible by 4, got {input_size}")
    side = input_size // 4
    body = nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 4 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * width * side * side, embed_dim),
    )
    return _Client(body, embed_dim)


def resnet18_client(
    in_channels: int = 3, embed_dim: int = 128, norm: str = "group", small_input: bool = True
) -> nn.Module:
    """torchvision ResNet-18 with an `embed_dim` output (ModelNet40, one view per client).

    BatchNorm couples the samples of a batch (see the module docstring), so `norm` is
    "group" (GroupNorm, 32 groups; default) or "frozen_bn" (BatchNorm with fixed
    statistics and affine, torchvision's FrozenBatchNorm2d). `small_input`
    replaces the 7x7/stride-2 stem and max-pool by a 3x3/stride-1 stem (32x32 views).
    """
    from torchvision.models import resnet18
    from torchvision.ops.misc import FrozenBatchNorm2d

    if norm not in NORMS:
        raise ValueError(f"resnet18_client norm {norm!r} is not one of {', '.join(NORMS)}")
    norm_layer = partial(nn.GroupNorm, 32) if norm == "group" else FrozenBatchNorm2d
    net = resnet18(num_classes=embed_dim, norm_layer=norm_layer)
    if small_input or in_channels != 3:
        kernel, stride, padding = (3, 1, 1) if small_input else (7, 2, 3)
        net.conv1 = nn.Conv2d(in_channels, 64, kernel, stride=stride, padding=padding, bias=False)
    if small_input:
        net.maxpool = nn.Identity()
    return _Client(net, embed_dim)


class TinyBertEncoder(nn.Module):
    """A randomly initialised BERT-shaped encoder (offline stand-in for pre-trained BERT).

    Token + position embeddings, LayerNorm, post-norm GELU transformer layers, a
    learned [CLS] vector prepended to the chunk; the embedding is Linear(hidden, e)
    of the [CLS] output. Dropout is 0 (per-sample outputs, see the module docstring).
    Token `pad_id` is masked.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden: int,
        layers: int,
        heads: int,
        intermediate: int,
        max_len: int,
        pad_id: int,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.tokens = nn.Embedding(vocab_size, hidden)
        self.positions = nn.Embedding(max_len + 1, hidden)
        self.cls = nn.Parameter(torch.zeros(1, 1, hidden))
        self.norm = nn.LayerNorm(hidden)
        layer = nn.TransformerEncoderLayer(
            hidden, heads, intermediate, dropout=0.0, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.project = nn.Linear(hidden, embed_dim)
        nn.init.normal_(self.cls, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.long()
        x = torch.cat([self.cls.expand(tokens.shape[0], -1, -1), self.tokens(tokens)], dim=1)
        x = self.norm(x + self.positions.weight[: x.shape[1]])
        pad = torch.cat([torch.zeros_like(tokens[:, :1], dtype=torch.bool), tokens == self.pad_id], dim=1)
        return self.project(self.encoder(x, src_key_padding_mask=pad)[:, 0])


class PretrainedBert(nn.Module):
    """Pre-trained BERT (transformers) from a staged directory; Linear(hidden, e) on the first token.

    `pretrained_dir` is a folder written by `save_pretrained` (staged by the rule `stage_pretrained`,
    fedrepro.data.pretrained); `bert_config` instead builds that architecture randomly initialised
    from a config.json dict without reading any file (the model/data fit check builds it on the meta
    device). Dropout is switched off (per-sample outputs, see the module docstring). The data set's
    chunks are expected to start with [CLS] when `cls_token_id` is None; otherwise it is prepended.
    """

    def __init__(
        self,
        pretrained_dir: str | None,
        embed_dim: int,
        pad_id: int,
        cls_token_id: int | None,
        bert_config: dict | None = None,
    ):
        super().__init__()
        try:
            from transformers import BertConfig, BertModel
        except ImportError as err:
            raise ImportError(
                "vfl_text_encoder with pretrained_dir needs the `transformers` package, the extra `bert` "
                "(pip install -e '.[bert]'; make install installs it); or set pretrained_dir: null for the "
                "offline randomly initialised encoder"
            ) from err
        no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
        if bert_config is not None:
            self.bert = BertModel(BertConfig.from_dict({**bert_config, **no_dropout}), add_pooling_layer=False)
        else:
            if not Path(pretrained_dir, "config.json").exists():
                raise FileNotFoundError(
                    f"vfl_text_encoder pretrained_dir {pretrained_dir!r} holds no config.json; "
                    "stage a BERT checkpoint there (snakemake's rule stage_pretrained downloads the pinned "
                    "bert-base-uncased; or save your own with save_pretrained) or set pretrained_dir: null"
                )
            self.bert = BertModel.from_pretrained(
                pretrained_dir, add_pooling_layer=False, local_files_only=True, **no_dropout
            )
        self.pad_id = pad_id
        self.cls_token_id = cls_token_id
        self.project = nn.Linear(self.bert.config.hidden_size, embed_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.long()
        if self.cls_token_id is not None:
            tokens = torch.cat([torch.full_like(tokens[:, :1], self.cls_token_id), tokens], dim=1)
        out = self.bert(input_ids=tokens, attention_mask=(tokens != self.pad_id).long())
        return self.project(out.last_hidden_state[:, 0])


def text_client_encoder(
    vocab_size: int = 2000,
    embed_dim: int = 128,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 2,
    intermediate: int = 128,
    max_len: int = 512,
    pad_id: int = 0,
    pretrained_dir: str | None = None,
    cls_token_id: int | None = None,
    bert_config: dict | None = None,
) -> nn.Module:
    """Client text encoder: pre-trained BERT from `pretrained_dir` (paper scale; `bert_config`: its
    architecture without weights, for the fit check) or a tiny random one (the other options)."""
    if pretrained_dir or bert_config is not None:
        net = PretrainedBert(pretrained_dir, embed_dim, pad_id, cls_token_id, bert_config)
    else:
        net = TinyBertEncoder(vocab_size, embed_dim, hidden, layers, heads, intermediate, max_len, pad_id)
    return _Client(net, embed_dim)


def server_head(in_features: int, num_classes: int, hidden: int = 128) -> nn.Module:
    """Server top model: Linear(M*e, H)-ReLU-Linear(H, K), no ReLU on the logits
    (DPZV §7: "a fully connected model of two linear layers with ReLU activations")."""
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))
