"""Tiny models for the example specs; weights are seeded, so every run builds the same model."""

from __future__ import annotations

import torch
from torch import nn


def make_mlp(hidden: int = 16, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, hidden), nn.GELU(), nn.Linear(hidden, 3))


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        )
        self.head = nn.Linear(8, 5)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(image).mean(dim=(2, 3)))


def make_cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = SmallCNN()
    # Non-trivial running statistics, so eval-mode batch norm differs from training mode.
    for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return model.train()  # left in training mode on purpose: the tool checks it in eval mode


class TinyAttention(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        attended, _ = self.attn(x, x, x, need_weights=False)
        return self.out(self.norm(x + attended))


def make_attention(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return TinyAttention()


class SignGate(nn.Module):
    """Python control flow on data: the TorchScript tracer bakes in the branch it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(10, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if bool(y.sum() > 0):
            return y * 2.0
        return -y


def make_sign_gate(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return SignGate()


class Outlier(nn.Module):
    """One activation channel 1000 times the others, as large language models' activations
    have; the head reads the other channels, which per-tensor int8 crushes."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.head = nn.Linear(32, 10)
        with torch.no_grad():
            self.expand.weight[0] *= 1000.0
            self.expand.bias[0] = 1000.0
            self.head.weight[:, 0] = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.expand(x)))


def make_outlier(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return Outlier()


class StreamGRU(nn.Module):
    """A streaming model: a chunk of frames and the recurrent state in ([layers, batch, hidden],
    the batch on axis 1), the chunk's scores and the next state out. Recurrent weights scaled by
    `gain` make the state sensitive, as a long stream is: a small error grows for a few steps."""

    def __init__(self, gain: float) -> None:
        super().__init__()
        self.gru = nn.GRU(4, 8, num_layers=2)
        self.head = nn.Linear(8, 3)
        with torch.no_grad():
            for name, weight in self.gru.named_parameters():
                if name.startswith("weight_hh"):
                    weight.mul_(gain)

    def forward(self, frames: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor,
                                                                          torch.Tensor]:
        out, state_next = self.gru(frames, state)
        return self.head(out), state_next


def make_stream(gain: float = 4.0, seed: int = 1) -> nn.Module:
    torch.manual_seed(seed)
    return StreamGRU(gain)
