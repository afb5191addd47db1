"""Small real training jobs for the layer-health findings: each planted cause, and a
healthy job (tied weights, a frozen layer, gradient accumulation, a warmup schedule)."""

from __future__ import annotations

import torch
from torch import nn

from debugkit import Recorder


def _data(n=64, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, (x[:, :4].sum(1, keepdim=True) > 0).float()


def _train(run_dir, model, opt, *, steps=40, every=4, noisy=False):
    x, y = _data()
    loss_fn = nn.BCEWithLogitsLoss()
    accumulate, sched = 1, None
    with Recorder(run_dir, model, opt, layer_stats_every=every) as rec:
        for i in range(steps):
            if noisy:  # a fresh batch with random labels: gradients of random sign
                x, y = _data(seed=i + 1)
                y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(i))]
            with rec.step((x, y)):
                loss = loss_fn(model(x), y) / accumulate
                loss.backward()
                rec.log(loss=loss)
                if (i + 1) % accumulate == 0:
                    opt.step()
                    opt.zero_grad()
                    if sched is not None:
                        sched.step()
    return run_dir


def dead_relu(run_dir):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    with torch.no_grad():
        m[2].bias.fill_(-20.0)  # the second hidden layer's pre-activations all negative
    return _train(run_dir, m, torch.optim.SGD(m.parameters(), lr=0.01))


def saturated_tanh(run_dir):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    with torch.no_grad():
        m[0].weight.mul_(30.0)  # inputs of the first tanh far beyond its linear range
    return _train(run_dir, m, torch.optim.SGD(m.parameters(), lr=0.01))


def growing_activations(run_dir):
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        lin = nn.Linear(32, 32)
        nn.init.normal_(lin.weight, std=1.0)  # gain ~5.7 per layer instead of ~1
        layers.append(lin)
    m = nn.Sequential(nn.Linear(16, 32), *layers, nn.Linear(32, 1))
    return _train(run_dir, m, torch.optim.SGD(m.parameters(), lr=0.0), steps=12)


def update_too_large(run_dir):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 1))
    return _train(run_dir, m, torch.optim.Adam(m.parameters(), lr=1.0), noisy=True)


def update_too_small(run_dir):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 1))
    return _train(run_dir, m, torch.optim.Adam(m.parameters(), lr=1e-8))


class _Tied(nn.Module):
    """A small token model whose output layer shares the embedding's weight, with a frozen
    projection and ReLU, Tanh and Sigmoid units in healthy ranges."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)
        self.hidden = nn.Linear(32, 32)
        self.relu = nn.ReLU()
        self.mix = nn.Linear(32, 32)
        self.tanh = nn.Tanh()
        self.gate = nn.Linear(32, 32)
        self.sig = nn.Sigmoid()
        self.norm = nn.LayerNorm(32)
        self.out = nn.Linear(32, 50, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, tok):
        h = self.frozen(self.emb(tok))
        h = self.relu(self.hidden(h))
        h = self.tanh(self.mix(h)) * self.sig(self.gate(h))
        return self.out(self.norm(h))


def healthy(run_dir, steps=60):
    torch.manual_seed(0)
    m = _Tied()
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(0, 50, (32, 8), generator=g)
    loss_fn = nn.CrossEntropyLoss()
    with Recorder(run_dir, m, opt, layer_stats_every=3) as rec:
        for i in range(steps):
            with rec.step(tok):
                logits = m(tok[:, :-1])
                loss = loss_fn(logits.reshape(-1, 50), tok[:, 1:].reshape(-1)) / 2
                loss.backward()
                rec.log(loss=loss)
                if i % 2 == 1:  # gradient accumulation over two micro-steps
                    opt.step()
                    opt.zero_grad()
                    sched.step()
    return run_dir


JOBS = {"dead_relu": dead_relu, "saturated_tanh": saturated_tanh,
        "growing_activations": growing_activations, "update_too_large": update_too_large,
        "update_too_small": update_too_small, "healthy": healthy}
