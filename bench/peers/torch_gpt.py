#!/usr/bin/env python3
"""The PyTorch peer of memopt's GPT: the same model (GPT-2 style, tied embedding, pre-LN, 4x GELU
MLP), the same synthetic batch shape, AdamW, run beside memopt on the same GPU so that every
comparison is a ratio taken in one run.

Prints one summary line per configuration and appends rows to --csv with the columns
peer,model,layers,hidden,heads,seq,batch,vocab,attn,precision,ckpt,accum,step_ms,step_ms_p10,
step_ms_p90,peak_allocated_bytes,static_bytes,activation_peak_bytes,loss_first,loss_last.

Example: python3 bench/peers/torch_gpt.py --preset gpt2-124m --attn materialized --precision fp32
"""
import argparse, csv, math, os, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

PRESETS = {"gpt2-124m": (12, 768, 12), "gpt2-350m": (24, 1024, 16), "gpt2-774m": (36, 1280, 20), "gpt2-1558m": (48, 1600, 25)}


def attention_core(q, k, v):
    """softmax(q k^T / sqrt(HS), causal) v, materialized: the (B, NH, T, T) scores and probabilities."""
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, NH, T, T)
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v


class Block(nn.Module):
    def __init__(self, C, NH, fused, selective=False):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH, self.fused = NH, fused
        self.selective = selective  # --ckpt selective: recompute only the attention core (Korthikanti et al.)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, HS)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.selective:
            y = checkpoint(attention_core, q, k, v, use_reentrant=False)
        else:
            y = attention_core(q, k, v)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def segment_len(ckpt, L):
    """Blocks per checkpoint segment, as memopt's mo_gpt_segment_len: full 1, every:K K, sqrt ceil(sqrt L)."""
    if ckpt == "full":
        return 1
    if ckpt.startswith("every:"):
        k = int(ckpt.split(":", 1)[1])
        if not 1 <= k <= L:
            raise SystemExit(f"torch_gpt.py: --ckpt {ckpt}: K must be in 1..{L}")
        return k
    if ckpt == "sqrt":
        return max(1, math.ceil(math.sqrt(L)))
    if ckpt in ("none", "selective"):
        return 0
    raise SystemExit(f"torch_gpt.py: --ckpt {ckpt}: accepted: none, full, every:K, sqrt, selective")


def run_blocks(blocks, x):
    for b in blocks:
        x = b(x)
    return x


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, V, fused, ckpt):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH, fused, ckpt == "selective") for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.ckpt = ckpt
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        K = segment_len(self.ckpt, len(self.blocks))
        if K == 0:
            for b in self.blocks:
                x = b(x)
        else:
            # memopt's policies: keep each segment's input, recompute the segment in backward
            for i in range(0, len(self.blocks), K):
                seg = self.blocks[i:i + K]
                x = checkpoint(lambda t, seg=seg: run_blocks(seg, t), x, use_reentrant=False)
        logits = self.lnf(x) @ self.wte.weight.t()  # (B, T, V), tied
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def run(a):
    L, C, NH = PRESETS[a.preset] if a.preset else (a.layers, a.hidden, a.heads)
    L, C, NH = a.layers or L, a.hidden or C, a.heads or NH
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    torch.manual_seed(a.seed)
    model = GPT(L, C, NH, a.seq, a.vocab, a.attn == "fused", a.ckpt).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, fused=True)
    g = torch.Generator(device="cpu").manual_seed(a.seed)
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g).to(dev)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")
    micro = a.batch // a.accum
    nparams = sum(p.numel() for p in model.parameters())

    def step():
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for k in range(a.accum):
            xs, ys = x[k * micro:(k + 1) * micro], y[k * micro:(k + 1) * micro]
            with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
                loss = model(xs, ys) / a.accum
            scaler.scale(loss).backward()
            total += loss.detach()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        return total

    losses, times = [], []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start.record()
        loss = step()
        stop.record()
        torch.cuda.synchronize()
        losses.append(float(loss))
        if i >= a.warmup:
            times.append(start.elapsed_time(stop))
    times.sort()
    peak = torch.cuda.max_memory_allocated()
    static = 4 * nparams * 4  # params, grads, Adam m and v, all fp32
    q = lambda f: times[min(len(times) - 1, max(0, math.ceil(f * len(times)) - 1))]
    row = dict(peer=f"pytorch-{torch.__version__}", model="gpt", layers=L, hidden=C, heads=NH, seq=a.seq, batch=a.batch,
               vocab=a.vocab, attn=a.attn, precision=a.precision, ckpt=a.ckpt, accum=a.accum,
               step_ms=statistics.median(times), step_ms_p10=q(0.1), step_ms_p90=q(0.9), peak_allocated_bytes=peak,
               static_bytes=static, activation_peak_bytes=peak - static, loss_first=losses[0], loss_last=losses[-1])
    print(f"pytorch {a.precision:4s} attn {a.attn:12s} ckpt {a.ckpt:9s} accum {a.accum}: step {row['step_ms']:.2f} ms "
          f"(p10 {row['step_ms_p10']:.2f}, p90 {row['step_ms_p90']:.2f}), peak {peak / 2**20:.0f} MiB, "
          f"activations {(peak - static) / 2**20:.0f} MiB, loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
    if a.csv:
        new = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
        with open(a.csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            if new:
                w.writeheader()
            w.writerow(row)
    del model, opt
    torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS) + [""])
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--hidden", type=int, default=0)
    p.add_argument("--heads", type=int, default=0)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--attn", default="materialized", help="comma list of materialized, fused")
    p.add_argument("--precision", default="fp32", help="comma list of fp32, tf32, fp16, bf16")
    p.add_argument("--ckpt", default="none", help="comma list of none, full, every:K, sqrt, selective")
    p.add_argument("--accum", default="1", help="comma list of micro-batch counts")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--csv", default="")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpt.py: no CUDA device: nothing to compare", file=sys.stderr)
        return 0
    for attn in a.attn.split(","):
        for prec in a.precision.split(","):
            for ck in a.ckpt.split(","):
                for acc in a.accum.split(","):
                    b = argparse.Namespace(**vars(a))
                    b.attn, b.precision, b.ckpt, b.accum = attn, prec, ck, int(acc)
                    run(b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
