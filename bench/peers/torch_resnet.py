#!/usr/bin/env python3
"""The PyTorch peer of memopt's ResNet: torchvision's ResNet v1.5 (torchvision.models.resnetD when
torchvision is installed, else the same network defined here), the same synthetic batch shape (B, 3, S, S)
images and K classes, AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, no weight decay, clipping at norm 1, as
memopt), cudnn.benchmark on, run beside memopt on the same GPU so that every comparison is a ratio taken
in one run.

Layout: --layout auto is channels-last for tf32/fp16/bf16 (what PyTorch users run for tensor cores) and
NCHW for fp32 (the issue's PyTorch rows); nchw / nhwc force one. 16 bits run under torch.autocast (batch
norm stays fp32 inside autocast), fp16 with GradScaler.

Checkpointing is over the residual blocks (layer1..layer4 flattened; stem and head never recomputed), the
layouts of memopt's models/ckpt_layout.c: full, every:K, sqrt as segments of K blocks each kept by its
input; segments:N is torch.utils.checkpoint.checkpoint_sequential(blocks, N) itself. (PyTorch's checkpoint
re-runs BatchNorm in training mode, so its running statistics move twice for a checkpointed block; memopt's
move once. Times and peaks are not affected.)

Prints one summary line per configuration and appends rows to --csv with the columns
peer,model,layers,hidden,input,classes,batch,layout,precision,ckpt,accum,step_ms,step_ms_p10,step_ms_p90,
peak_allocated_bytes,static_bytes,activation_peak_bytes,params,loss_first,loss_last.

Example: python3 bench/peers/torch_resnet.py --preset resnet50 --batch 128 --precision fp32,bf16 --ckpt none,segments:4
"""
import argparse, csv, math, os, statistics, sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

# depth: (bottleneck, blocks per stage), torchvision's
DEPTHS = {18: (False, [2, 2, 2, 2]), 34: (False, [3, 4, 6, 3]), 50: (True, [3, 4, 6, 3]), 101: (True, [3, 4, 23, 3]),
          152: (True, [3, 8, 36, 3])}
PRESETS = {f"resnet{d}": d for d in DEPTHS}
# torchvision's parameter counts at 1000 classes (a wrong definition here trips this)
TV_PARAMS = {18: 11689512, 34: 21797672, 50: 25557032, 101: 44549160, 152: 60192808}


def depth_blocks(D):
    """memopt's resnet_arch depth rule: the five torchvision depths; 8n+2 < 50 basic; 12n+2 bottleneck."""
    if D in DEPTHS:
        return DEPTHS[D]
    if 10 <= D < 50 and (D - 2) % 8 == 0:
        return False, [(D - 2) // 8] * 4
    if D >= 14 and (D - 2) % 12 == 0:
        return True, [(D - 2) // 12] * 4
    raise SystemExit(f"torch_resnet.py: --layers {D}: not a ResNet depth")


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, w, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, w, 3, stride, 1, bias=False), nn.BatchNorm2d(w)
        self.conv2, self.bn2 = nn.Conv2d(w, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w)
        self.downsample = None
        if stride != 1 or cin != w:
            self.downsample = nn.Sequential(nn.Conv2d(cin, w, 1, stride, bias=False), nn.BatchNorm2d(w))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        out += x if self.downsample is None else self.downsample(x)
        return F.relu(out, inplace=True)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, w, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, w, 1, bias=False), nn.BatchNorm2d(w)
        self.conv2, self.bn2 = nn.Conv2d(w, w, 3, stride, 1, bias=False), nn.BatchNorm2d(w)  # v1.5: stride here
        self.conv3, self.bn3 = nn.Conv2d(w, 4 * w, 1, bias=False), nn.BatchNorm2d(4 * w)
        self.downsample = None
        if stride != 1 or cin != 4 * w:
            self.downsample = nn.Sequential(nn.Conv2d(cin, 4 * w, 1, stride, bias=False), nn.BatchNorm2d(4 * w))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = F.relu(self.bn2(self.conv2(out)), inplace=True)
        out = self.bn3(self.conv3(out))
        out += x if self.downsample is None else self.downsample(x)
        return F.relu(out, inplace=True)


class ResNet(nn.Module):
    """torchvision.models.ResNet's layout and initialization (kaiming_normal_ fan_out for convs, BN 1/0)."""

    def __init__(self, D, W, K):
        super().__init__()
        bottleneck, nblk = depth_blocks(D)
        B = Bottleneck if bottleneck else Basic
        self.conv1, self.bn1 = nn.Conv2d(3, W, 7, 2, 3, bias=False), nn.BatchNorm2d(W)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        cin, layers = W, []
        for s, n in enumerate(nblk):
            blocks = []
            for i in range(n):
                blocks.append(B(cin, W << s, 2 if s > 0 and i == 0 else 1))
                cin = (W << s) * B.expansion
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(cin, K)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)


def build(D, W, K):
    if D in DEPTHS and W == 64:
        try:
            import torchvision
            return getattr(torchvision.models, f"resnet{D}")(num_classes=K), f"torchvision-{torchvision.__version__}"
        except ImportError:
            pass
    return ResNet(D, W, K), "own"


def layout(ckpt, L):
    """(len, blocks) as memopt's mo_ckpt_layout_of: blocks [0, blocks) in checkpointed segments of len."""
    if ckpt == "none":
        return 0, 0
    if ckpt == "full":
        return 1, L
    if ckpt.startswith("every:"):
        k = int(ckpt.split(":", 1)[1])
        if not 1 <= k <= L:
            raise SystemExit(f"torch_resnet.py: --ckpt {ckpt}: K must be in 1..{L}")
        return k, L
    if ckpt == "sqrt":
        return max(1, math.ceil(math.sqrt(L))), L
    if ckpt.startswith("segments:"):
        n = max(1, min(int(ckpt.split(":", 1)[1]), L))
        return (L // n, (n - 1) * (L // n)) if (n - 1) * (L // n) else (0, 0)
    raise SystemExit(f"torch_resnet.py: --ckpt {ckpt}: accepted: none, full, every:K, sqrt, segments:N")


def run_blocks(blocks, x):
    for b in blocks:
        x = b(x)
    return x


def forward(model, blocks, ckpt, x):
    x = model.maxpool(model.relu(model.bn1(model.conv1(x))))
    if ckpt.startswith("segments:"):
        n = max(1, min(int(ckpt.split(":", 1)[1]), len(blocks)))
        x = checkpoint_sequential(blocks, n, x, use_reentrant=False)
    else:
        seg, nck = layout(ckpt, len(blocks))
        for i in range(0, nck, max(seg, 1)):  # none: seg 0 and no checkpointed block
            part = blocks[i:min(i + seg, nck)]
            x = checkpoint(lambda t, part=part: run_blocks(part, t), x, use_reentrant=False)
        x = run_blocks(blocks[nck:], x)
    return model.fc(torch.flatten(model.avgpool(x), 1))


def run(a):
    D = PRESETS[a.preset] if a.preset else a.layers
    D, W, S, K = a.layers or D, a.hidden, a.input, a.classes
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    torch.manual_seed(a.seed)
    model, origin = build(D, W, K)
    nparams = sum(p.numel() for p in model.parameters())
    if K == 1000 and W == 64 and D in TV_PARAMS and nparams != TV_PARAMS[D]:
        raise SystemExit(f"torch_resnet.py: resnet{D} has {nparams} parameters, torchvision's {TV_PARAMS[D]}")
    cl = a.layout == "nhwc" or (a.layout == "auto" and a.precision != "fp32")
    fmt = torch.channels_last if cl else torch.contiguous_format
    model = model.to(dev, memory_format=fmt)
    blocks = nn.Sequential(*model.layer1, *model.layer2, *model.layer3, *model.layer4)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, fused=True)
    g = torch.Generator(device="cpu").manual_seed(a.seed)
    x = (torch.rand(a.batch, 3, S, S, generator=g) * 2 - 1).to(dev).contiguous(memory_format=fmt)
    y = torch.randint(0, K, (a.batch,), generator=g).to(dev)
    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")
    micro = a.batch // a.accum

    def step():
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for k in range(a.accum):
            xs, ys = x[k * micro:(k + 1) * micro], y[k * micro:(k + 1) * micro]
            with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
                logits = forward(model, blocks, a.ckpt, xs)
            loss = F.cross_entropy(logits.float(), ys) / a.accum
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
    lay = "nhwc" if cl else "nchw"
    row = dict(peer=f"pytorch-{torch.__version__}", model="resnet", layers=D, hidden=W, input=S, classes=K, batch=a.batch,
               layout=lay, precision=a.precision, ckpt=a.ckpt, accum=a.accum, step_ms=statistics.median(times),
               step_ms_p10=q(0.1), step_ms_p90=q(0.9), peak_allocated_bytes=peak, static_bytes=static,
               activation_peak_bytes=peak - static, params=nparams, loss_first=losses[0], loss_last=losses[-1])
    print(f"pytorch resnet{D} ({origin}) {a.precision:4s} {lay} ckpt {a.ckpt:10s} accum {a.accum}: step "
          f"{row['step_ms']:.2f} ms (p10 {row['step_ms_p10']:.2f}, p90 {row['step_ms_p90']:.2f}), peak {peak / 2**20:.0f} MiB, "
          f"activations {(peak - static) / 2**20:.0f} MiB, loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
    if a.csv:
        new = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
        with open(a.csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            if new:
                w.writeheader()
            w.writerow(row)
    del model, opt, blocks
    torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="resnet50", choices=sorted(PRESETS) + [""])
    p.add_argument("--layers", type=int, default=0, help="depth (overrides the preset)")
    p.add_argument("--hidden", type=int, default=64, help="base width")
    p.add_argument("--input", type=int, default=224, help="image side")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--layout", default="auto", choices=["auto", "nchw", "nhwc"])
    p.add_argument("--precision", default="fp32", help="comma list of fp32, tf32, fp16, bf16")
    p.add_argument("--ckpt", default="none", help="comma list of none, full, every:K, sqrt, segments:N")
    p.add_argument("--accum", default="1", help="comma list of micro-batch counts")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--csv", default="")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_resnet.py: no CUDA device: nothing to compare", file=sys.stderr)
        return 0
    for prec in a.precision.split(","):
        for ck in a.ckpt.split(","):
            for acc in a.accum.split(","):
                b = argparse.Namespace(**vars(a))
                b.precision, b.ckpt, b.accum = prec, ck, int(acc)
                run(b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
