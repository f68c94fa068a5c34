"""Train a Llama-style decoder whose non-attention work runs in codac blocks,
beside the same model written in plain PyTorch.

Each decoder layer's output projection, residuals, RMSNorms, SwiGLU MLP and
the next layer's QKV projection with RoPE are the codac blocks of
``examples/torch/llama.coda``; attention is ``F.scaled_dot_product_attention``;
the final norm, LM head and cross-entropy are ``examples/lm_head_ce.coda``.
The plain model has the same modules and parameter names, so both start from
one initialization and train with AdamW on the same batches: bytes of the
Python standard library's sources (no download).

    python examples/torch/train_llama.py --config tiny --device cpu --steps 20 --model both
    python examples/torch/train_llama.py --config 1b --steps 300 --model codac
    python examples/torch/train_llama.py --config 1b --steps 300 --model torch --compile
    torchrun --nproc-per-node 2 examples/torch/train_llama.py --config 1b --dist fsdp

It prints the loss, tokens/s and peak memory, with a progress bar, and with
``--json PATH`` writes every step's loss and the summary.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, NoReturn, Optional

import torch
import torch.nn.functional as F
from torch import nn

import codac

HERE = Path(__file__).resolve().parent
BF16 = torch.bfloat16


@dataclass(frozen=True)
class Config:
    dim: int
    ffn: int
    head_dim: int
    q_heads: int
    kv_heads: int
    layers: int
    vocab: int
    batch: int
    seq: int
    lr: float

    @property
    def qkv(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def dims(self) -> dict[str, int]:
        return {"D": self.dim, "F": self.ffn, "HD": self.head_dim, "QH": self.q_heads, "KVH": self.kv_heads}


CONFIGS = {
    # Runs on the CPU through codac's interpreter in seconds (CI).
    "tiny": Config(dim=64, ffn=128, head_dim=16, q_heads=4, kv_heads=2, layers=2, vocab=256, batch=2, seq=32, lr=3e-3),
    # Llama-3.2 1B widths with a byte vocabulary, 8192 tokens a step.
    "1b": Config(dim=2048, ffn=8192, head_dim=64, q_heads=32, kv_heads=8, layers=4, vocab=256, batch=4, seq=2048, lr=3e-4),
}


# ---------------------------------------------------------------- the math in plain PyTorch


def rmsnorm(x: torch.Tensor, g: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * g.float()).to(BF16)


def swiglu(z: torch.Tensor) -> torch.Tensor:
    gate, up = z.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(BF16)


def rope(u: torch.Tensor, pos: torch.Tensor, cfg: Config, base: float = 500000.0) -> torch.Tensor:
    """Rotate-half RoPE on the q and k heads of a fused [M, Q] projection."""
    rotated = (cfg.q_heads + cfg.kv_heads) * cfg.head_dim
    half = cfg.head_dim // 2
    freqs = base ** (-torch.arange(half, device=u.device, dtype=torch.float64) * 2 / cfg.head_dim)
    angles = pos.to(torch.float64)[:, None] * freqs[None, :]
    cos, sin = angles.cos().float(), angles.sin().float()
    heads = u[:, :rotated].float().unflatten(-1, (-1, cfg.head_dim))
    a, b = heads[..., :half], heads[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    return torch.cat([out, u[:, rotated:].float()], dim=-1).to(BF16)


def attention(qkv: torch.Tensor, cfg: Config) -> torch.Tensor:
    """Causal GQA attention over a fused [M, Q] projection: [M, D]."""
    b, t, hd = cfg.batch, qkv.shape[0] // cfg.batch, cfg.head_dim
    q, k, v = qkv.split([cfg.q_heads * hd, cfg.kv_heads * hd, cfg.kv_heads * hd], dim=-1)
    q = q.reshape(b, t, cfg.q_heads, hd).transpose(1, 2)
    k = k.reshape(b, t, cfg.kv_heads, hd).transpose(1, 2)
    v = v.reshape(b, t, cfg.kv_heads, hd).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return out.transpose(1, 2).reshape(b * t, cfg.q_heads * hd)


class TorchStem(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.g_attn = nn.Parameter(torch.ones(cfg.dim, dtype=BF16))
        self.w_qkv = nn.Parameter(torch.empty(cfg.qkv, cfg.dim, dtype=BF16))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return rope(rmsnorm(x, self.g_attn) @ self.w_qkv.T, pos, self.cfg)


class TorchLayer(nn.Module):
    def __init__(self, cfg: Config, last: bool) -> None:
        super().__init__()
        self.cfg, self.last = cfg, last
        self.w_o = nn.Parameter(torch.empty(cfg.dim, cfg.dim, dtype=BF16))
        self.g_ffn = nn.Parameter(torch.ones(cfg.dim, dtype=BF16))
        self.w_gu = nn.Parameter(torch.empty(2 * cfg.ffn, cfg.dim, dtype=BF16))
        self.w_down = nn.Parameter(torch.empty(cfg.dim, cfg.ffn, dtype=BF16))
        if not last:
            self.g_attn = nn.Parameter(torch.ones(cfg.dim, dtype=BF16))
            self.w_qkv = nn.Parameter(torch.empty(cfg.qkv, cfg.dim, dtype=BF16))

    def forward(self, attn: torch.Tensor, x0: torch.Tensor, pos: Optional[torch.Tensor] = None):
        x1 = x0 + attn @ self.w_o.T
        x2 = x1 + swiglu(rmsnorm(x1, self.g_ffn) @ self.w_gu.T) @ self.w_down.T
        if self.last:
            return x2
        return x2, rope(rmsnorm(x2, self.g_attn) @ self.w_qkv.T, pos, self.cfg)


class TorchHead(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(cfg.dim, dtype=BF16))
        self.w_lm = nn.Parameter(torch.empty(cfg.vocab, cfg.dim, dtype=BF16))

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = (rmsnorm(x, self.g) @ self.w_lm.T).float()
        return F.cross_entropy(logits, targets.long(), ignore_index=-100), logits.logsumexp(-1)


# ---------------------------------------------------------------- the model


class Llama(nn.Module):
    """The decoder; ``blocks`` is "codac" or "torch". Both have the same
    parameter names, so one's ``state_dict`` loads into the other."""

    def __init__(self, cfg: Config, blocks: str) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim, dtype=BF16)
        n = cfg.layers
        if blocks == "codac":
            prog = codac.load(HERE / "llama.coda", dims=cfg.dims())
            head = codac.load(HERE.parent / "lm_head_ce.coda", dims={"D": cfg.dim, "V": cfg.vocab})
            full = ["w_o", "g_ffn", "w_gu", "w_down", "g_attn", "w_qkv"]
            self.stem = codac.nn.Block(prog, "qkv_in", params=["g_attn", "w_qkv"])
            self.layers = nn.ModuleList(
                codac.nn.Block(prog, "layer", params=full) if i < n - 1 else codac.nn.Block(prog, "layer_last", params=full[:4])
                for i in range(n)
            )
            self.head = codac.nn.Block(head, "lm_head_ce", params=["g", "w_lm"])
        elif blocks == "torch":
            self.stem = TorchStem(cfg)
            self.layers = nn.ModuleList(TorchLayer(cfg, last=i == n - 1) for i in range(n))
            self.head = TorchHead(cfg)
        else:
            raise ValueError(f"blocks must be 'codac' or 'torch', got {blocks!r}")

    def init_weights(self, seed: int) -> None:
        """Llama-style: N(0, 0.02) matrices, the residual outputs scaled by
        1/sqrt(2 * layers), unit gains, N(0, 1) embeddings."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    value = torch.ones(p.shape)
                elif name.startswith("embed"):
                    value = torch.randn(p.shape, generator=g)
                else:
                    std = 0.02 / math.sqrt(2 * self.cfg.layers) if name.endswith(("w_o", "w_down")) else 0.02
                    value = torch.randn(p.shape, generator=g) * std
                p.copy_(value.to(p.dtype))

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        pos = torch.arange(tokens.shape[1], device=tokens.device, dtype=torch.int32).repeat(tokens.shape[0])
        x = self.embed(tokens.flatten())
        qkv = self.stem(x, pos)
        for i, layer in enumerate(self.layers):
            attn = attention(qkv, cfg)
            if i < len(self.layers) - 1:
                x, qkv = layer(attn, x, pos)
            else:
                x = layer(attn, x)
        loss, _ = self.head(x, targets.flatten().to(torch.int32))
        return loss


# ---------------------------------------------------------------- data and training


def corpus(limit: int = 64 << 20) -> torch.Tensor:
    """The bytes of the Python standard library's sources, in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= limit:
            break
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


def batches(
    data: torch.Tensor, cfg: Config, seed: int, device: torch.device, rank: int = 0, world: int = 1
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Random windows of ``seq + 1`` bytes: inputs and next-byte targets.
    Of a global batch of ``world * batch`` windows, rank ``rank`` takes its
    ``batch`` rows, so one process with ``batch * world`` rows sees the same
    data as ``world`` processes together."""
    g = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, data.numel() - cfg.seq - 1, (cfg.batch * world,), generator=g)
        starts = starts[rank * cfg.batch : (rank + 1) * cfg.batch]
        window = torch.stack([data[s : s + cfg.seq + 1] for s in starts.tolist()]).long()
        yield window[:, :-1].to(device), window[:, 1:].to(device)


def progress(step: int, steps: int, loss: float, tokens_per_s: float) -> None:
    width = 30
    done = width * step // steps
    bar = "#" * done + "." * (width - done)
    print(f"\r[{bar}] {step}/{steps} loss {loss:.4f} {tokens_per_s:,.0f} tok/s", end="", file=sys.stderr, flush=True)


def train(
    model: nn.Module,
    cfg: Config,
    steps: int,
    seed: int,
    device: torch.device,
    step_fn: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
    warmup: int = 3,
    quiet: bool = False,
    rank: int = 0,
    world: int = 1,
) -> dict:
    """AdamW for ``steps`` steps; returns the losses and the throughput."""
    data = corpus()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    forward = step_fn if step_fn is not None else model
    losses: list[torch.Tensor] = []
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    timed_from = None
    for step, (tokens, targets) in enumerate(batches(data, cfg, seed, device, rank, world), start=1):
        loss = forward(tokens, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if step == warmup:
            if cuda:
                torch.cuda.synchronize(device)
            timed_from = time.perf_counter()
        if not quiet and (step % 10 == 0 or step == steps):
            elapsed = time.perf_counter() - (timed_from or start)
            rate = cfg.tokens * (step - (warmup if timed_from else 0)) / max(elapsed, 1e-9)
            progress(step, steps, float(loss.detach()), rate)
        if step == steps:
            break
    if cuda:
        torch.cuda.synchronize(device)
    end = time.perf_counter()
    if not quiet:
        print(file=sys.stderr)
    timed_steps = steps - warmup if timed_from is not None and steps > warmup else steps
    seconds = end - (timed_from if timed_from is not None and steps > warmup else start)
    return {
        "losses": [float(x) for x in losses],
        "tokens_per_s": cfg.tokens * timed_steps / seconds,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
    }


def build(cfg: Config, blocks: str, seed: int, device: torch.device) -> Llama:
    torch.manual_seed(seed)
    model = Llama(cfg, blocks)
    model.init_weights(seed)
    return model.to(device)


def distributed(args: argparse.Namespace, cfg: Config) -> NoReturn:
    """One process per GPU under torchrun: FSDP2 (fully_shard per block) or DDP."""
    import torch.distributed as dist

    cuda = args.device.startswith("cuda")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    model = build(cfg, args.model, args.seed, device)
    if args.dist == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for module in [model.stem, *model.layers, model.head]:
            fully_shard(module)
        fully_shard(model)
        step_model: nn.Module = model
    else:
        step_model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    # Each rank takes its rows of a global batch of world × batch windows:
    # `--batch-multiple world` trains one process on the same data.
    result = train(step_model, cfg, args.steps, args.seed, device, quiet=rank != 0, rank=rank, world=world)
    mean = torch.tensor(result["losses"], device=device)
    dist.all_reduce(mean)
    result["losses"] = (mean / world).tolist()
    result["tokens_per_s"] *= world
    if rank == 0:
        where = f"{world} GPUs" if cuda else f"{world} processes"
        report(args, cfg, {f"{args.model} ({args.dist}, {where})": result})
    # Rank 0 writes the report while the others would already tear down
    # their connections: meet first, so that no rank's teardown finds a
    # peer gone.
    dist.barrier()
    dist.destroy_process_group()
    # A gloo worker thread drops its last reference to a collective's
    # tensors after the collective has completed, and that needs the GIL.
    # When the interpreter starts finalizing first, the thread is ended
    # inside the tensor's destructor and the process aborts ("terminate
    # called without an active exception", about 1 run in 50 here, with a
    # plain PyTorch model too). Everything is written: leave without
    # finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def report(args: argparse.Namespace, cfg: Config, results: dict[str, dict]) -> None:
    print(f"config {args.config}: {asdict(cfg)}, {args.steps} steps, seed {args.seed}")
    for name, r in results.items():
        memory = "" if r["peak_memory_gib"] is None else f", peak memory {r['peak_memory_gib']:.2f} GiB"
        print(f"{name}: final loss {r['losses'][-1]:.4f}, {r['tokens_per_s']:,.0f} tokens/s{memory}")
    if len(results) == 2:
        (na, a), (nb, b) = results.items()
        gaps = [abs(x - y) for x, y in zip(a["losses"], b["losses"])]
        print(f"|loss({na}) - loss({nb})| per step: max {max(gaps):.4f}, last {gaps[-1]:.4f}")
    if args.json:
        run = {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
            "torch": torch.__version__,
            "command": " ".join(["python", "examples/torch/train_llama.py", *sys.argv[1:]]),
        }
        document = {"run": run, "config": asdict(cfg), "args": vars(args), "results": results}
        Path(args.json).write_text(json.dumps(document, indent=1))


def main(argv: Optional[list[str]] = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    parser.add_argument("--model", choices=["codac", "torch", "both"], default="both")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (default mode)")
    parser.add_argument("--dist", choices=["fsdp", "ddp"], help="under torchrun: shard with FSDP2 or replicate with DDP")
    parser.add_argument("--json", help="write the losses and the summary to this file")
    parser.add_argument(
        "--batch-multiple", type=int, default=1, help="train on this many times the config's batch (the global batch of that many ranks)"
    )
    args = parser.parse_args(argv)
    cfg = CONFIGS[args.config]
    if args.batch_multiple > 1:
        if args.dist:
            parser.error("--batch-multiple is for one process; under torchrun each rank takes its share")
        cfg = replace(cfg, batch=cfg.batch * args.batch_multiple)
    if args.dist:
        if args.model == "both":
            parser.error("--dist trains one model: pass --model codac or --model torch")
        distributed(args, cfg)
    device = torch.device(args.device)
    names = ["codac", "torch"] if args.model == "both" else [args.model]
    results = {}
    for name in names:
        model = build(cfg, name, args.seed, device)
        step_fn = torch.compile(model) if args.compile else None
        label = f"{name}{' + torch.compile' if args.compile else ''}"
        results[label] = train(model, cfg, args.steps, args.seed, device, step_fn=step_fn)
    report(args, cfg, results)
    return results


if __name__ == "__main__":
    main()
