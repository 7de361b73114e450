"""Channel-wise selection: each channel must be retrieved from a different position.

A sequence holds ``length`` data tokens; token ``i`` carries one symbol per channel,
``sym[i, j]`` in ``[0, vocab)``, and a final query token follows. The answer for channel ``j`` is
the symbol at a channel-specific position: ``sym[pos[j], j]`` with distinct ``pos[j]`` fixed by
the task seed. One mixer layer reads the sequence; a linear readout of the query token's
output predicts every channel (accuracy = fraction of channels right).

Why it separates the mixers: a softmax head mixes all channels with the *same* weights ``p_t``,
so the query sees ``sum_i p(i) v_i`` — a convex mixture that cannot put weight on ``pos[j]``
for channel ``j`` and on ``pos[j']`` for channel ``j'`` at once. The free-energy read is a soft
maximum per channel, ``(1/beta) log sum_i p(i) exp(beta v_ij)``: a value projection that adds a
large offset at ``pos[j]`` to channel ``j`` lets every channel select its own position.

    python -m tsmix.models.synthetic.channel_select            # full run, both mixers
    python -m tsmix.models.synthetic.channel_select --steps 300 --mixers fem-sm
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

import tsmix
from tsmix.models.capabilities import accepted, option_names
from tsmix.models.loop import train_steps


@dataclass(frozen=True)
class ChannelSelectConfig:
    channels: int = 4  # channels per token; each is answered from its own position
    vocab: int = 8  # symbols per channel
    length: int = 16  # data tokens before the query token
    dim: int = 64  # model width
    mixer: str = "fem-sm"
    heads: int = 1  # one head: the claim is about what a single head can read
    mixer_options: tuple = (("cond", False),)  # C off: parameter count equal to softmax's
    # Attention-probability dropout for both mixers (their shared "dropout" option): without it a
    # single head may lock onto one position early; FEM then cannot reach the other channels'
    # positions (its prior weight there is ~0) and one channel stays at chance for some seeds.
    dropout: float = 0.1
    steps: int = 3000
    batch: int = 128
    lr: float = 3e-3
    eval_samples: int = 4096
    seed: int = 0


class ChannelSelectTask:
    """Samples ``(tokens (B, L, C), target (B, C))``; ``pos`` is fixed by the seed."""

    def __init__(self, cfg: ChannelSelectConfig) -> None:
        if cfg.channels > cfg.length:
            raise tsmix.TsmixError(
                f"channel_select: channels={cfg.channels} need distinct positions; use length >= channels"
            )
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        self.pos = torch.randperm(cfg.length, generator=g)[: cfg.channels]  # (C,) distinct

    def sample(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.cfg
        sym = torch.randint(0, c.vocab, (n, c.length, c.channels), generator=generator)
        target = sym[:, self.pos, torch.arange(c.channels)]  # (B, C): sym[pos[j], j]
        return sym, target


class ChannelSelectModel(nn.Module):
    """Embedding (sum of per-channel symbol embeddings + position) -> one mixer -> linear readout."""

    def __init__(self, cfg: ChannelSelectConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.sym_emb = nn.Embedding(cfg.channels * cfg.vocab, cfg.dim)
        self.pos_emb = nn.Embedding(cfg.length + 1, cfg.dim)  # last slot: the query token
        opts = dict(cfg.mixer_options)
        if cfg.dropout and "dropout" in option_names(cfg.mixer):
            opts.setdefault("dropout", cfg.dropout)
        self.mixer = tsmix.build_mixer(cfg.mixer, cfg.dim, heads=cfg.heads, causal=True, **opts)
        self.readout = nn.Linear(cfg.dim, cfg.channels * cfg.vocab)

    def forward(self, sym: torch.Tensor) -> torch.Tensor:  # (B, L, C) -> logits (B, C, V)
        c = self.cfg
        ids = sym + c.vocab * torch.arange(c.channels, device=sym.device)  # channel-specific ids
        data = self.sym_emb(ids).sum(2)  # (B, L, D)
        x = torch.cat([data, torch.zeros_like(data[:, :1])], dim=1) + self.pos_emb.weight  # (B, L+1, D)
        out = self.mixer(x)[:, -1]  # the query token's read
        return self.readout(out).view(-1, c.channels, c.vocab)


def run(cfg: ChannelSelectConfig, log_every: int = 0) -> dict:
    """Train one model on fresh samples; return held-out accuracy, loss and parameter counts."""
    torch.manual_seed(cfg.seed)
    task = ChannelSelectTask(cfg)
    model = ChannelSelectModel(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps, pct_start=0.1)
    g = torch.Generator().manual_seed(cfg.seed + 1)
    batches = (task.sample(cfg.batch, g) for _ in range(cfg.steps))

    def loss_fn(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        sym, target = batch
        return F.cross_entropy(model(sym).flatten(0, 1), target.flatten())

    def log(step: int, loss: float) -> None:
        if log_every and step % log_every == 0:
            print(f"  [{cfg.mixer}] step {step}: loss {loss:.4f}", flush=True)

    done = train_steps(model, opt, batches, loss_fn, scheduler=sched, callbacks=[log], check_finite=False)
    model.eval()
    with torch.no_grad():
        sym, target = task.sample(cfg.eval_samples, torch.Generator().manual_seed(cfg.seed + 2))
        logits = model(sym)
        acc = (logits.argmax(-1) == target).float().mean().item()
        eval_loss = F.cross_entropy(logits.flatten(0, 1), target.flatten()).item()
    return {
        "mixer": cfg.mixer,
        "accuracy": acc,
        "eval_loss": eval_loss,
        "mixer_params": sum(p.numel() for p in model.mixer.parameters()),
        "model_params": sum(p.numel() for p in model.parameters()),
        "seconds": done.seconds,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixers", default="fem-sm,softmax", help="comma-separated mixer names")
    ap.add_argument("--steps", type=int, default=ChannelSelectConfig.steps)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--dim", type=int, default=ChannelSelectConfig.dim)
    ap.add_argument("--length", type=int, default=ChannelSelectConfig.length)
    ap.add_argument("--channels", type=int, default=ChannelSelectConfig.channels)
    ap.add_argument("--vocab", type=int, default=ChannelSelectConfig.vocab)
    ap.add_argument("--dropout", type=float, default=ChannelSelectConfig.dropout)
    ap.add_argument("--lr", type=float, default=ChannelSelectConfig.lr)
    ap.add_argument("--batch", type=int, default=ChannelSelectConfig.batch)
    ap.add_argument("--log-every", type=int, default=0)
    ap.add_argument(
        "--fem-option", action="append", default=[], metavar="KEY=VALUE",
        help="extra option for the mixers that accept it (repeatable), e.g. exp_cap=60",
    )
    args = ap.parse_args(argv)
    fem_opts = {"cond": False}
    for item in args.fem_option:
        key, _, value = item.partition("=")
        fem_opts[key] = ast.literal_eval(value)
    base = ChannelSelectConfig(
        steps=args.steps, dim=args.dim, length=args.length, channels=args.channels, vocab=args.vocab,
        lr=args.lr, batch=args.batch, dropout=args.dropout,
    )
    print("config:", {k: v for k, v in asdict(base).items() if k not in ("mixer", "mixer_options", "seed")})
    print(f"{'mixer':<10} {'seed':>4} {'accuracy':>9} {'eval_loss':>9} {'mixer_params':>12} {'seconds':>8}")
    for name in args.mixers.split(","):
        opts = tuple(sorted(accepted(name, fem_opts).items()))
        for seed in (int(s) for s in args.seeds.split(",")):
            r = run(replace(base, mixer=name, mixer_options=opts, seed=seed), args.log_every)
            print(
                f"{name:<10} {seed:>4} {r['accuracy']:>9.4f} {r['eval_loss']:>9.4f} "
                f"{r['mixer_params']:>12} {r['seconds']:>8.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
