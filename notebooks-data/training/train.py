#!/usr/bin/env python3
"""Pretrains a small GPT-style byte-level decoder with every nn.Linear under a training recipe, and writes
its losses, per-layer GEMM SQNR, activation kurtosis and scale-saturation counts (notebooks-data/README.md
"Emulated pretraining").

    python3 notebooks-data/training/train.py --recipe mxfp8 --seed 1 --device cuda --minutes 5

--recipe:
  fp32, bf16             references: PyTorch's own GEMMs (bf16: autocast to BF16, FP32 accumulation)
  RECIPE                 a qmx training recipe (qmx.recipe_names(): mxfp8, mxfp8-ocp, fp8-blockwise, fp8-current,
                         fp8-delayed, nvfp4, quartet, ...): every Linear is qmx.torch.Linear, its three GEMMs
                         bit for bit as the recipe's hardware computes them (on CUDA tensors through the
                         emulation engine: the recipes it runs, gpu/README.md)
  fake:RECIPE            the fake-quant emulation of mxfp8, mxfp8-ocp, nvfp4 or quartet, as torchao's and vLLM's
                         emulation run it: each GEMM operand made as the recipe makes it (its quantizer along K, with
                         the same element, scale rule and stochastic rounding; nvfp4's random Hadamard-16 on the
                         WGRAD operands; quartet's Hadamard-32 + QuEST forward, random Hadamard-32 + SR backward,
                         trust mask and inverse transform, written in PyTorch), dequantized, and multiplied by
                         PyTorch in BF16 with FP32 accumulation

The corpus is the text of Debian's `fortunes` package (/usr/share/games/fortunes: every file without an
extension, in name order, concatenated), read as bytes (vocabulary 256). The first 90 % of the bytes are the
training split, the last 10 % the validation split. The initialisation, the batches (contexts drawn by a
generator seeded with --seed) and the data order are the same for every recipe.

Outputs in --out (default: this script's directory), named RECIPE-sSEED ("fake:" becomes "fake-"):
  NAME.csv         step, tokens, lr, train_loss, val_loss (every --eval-every steps, else empty), seconds
  NAME-layers.csv  every --stats-every steps, per Linear: the forward GEMM's SQNR against an FP64 GEMM of the
                   same unquantized input and weight, the input's kurtosis, and the saturated and flushed
                   elements of its input and weight under the recipe's forward quantizers (counted on the
                   host by qmx.quantize_stats: a measurement, outside the training path)
  NAME.json        the command, seed, configuration, parameter count, versions, device, and final losses
"""
import argparse
import csv
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import qmx
import qmx.torch as qt

CORPUS = "/usr/share/games/fortunes"

# Each recipe's forward operands (X, W) and its gradient as qmx.quantize spells them, with the recipe's
# profile: the quantizers of docs/studies.md "Training recipes", for the fake-quant emulation and the
# saturation counts.
FORWARD_SPECS = {
    "mxfp8": (("mxfp8", {"profile": "transformer-engine"}), ("mxfp8", {"profile": "transformer-engine"}),
              ("mxfp8", {"profile": "transformer-engine"})),
    "mxfp8-ocp": (("mxfp8-ocp", {"profile": "ocp"}), ("mxfp8-ocp", {"profile": "ocp"}), ("mxfp8-ocp", {"profile": "ocp"})),
    "mxfp8-e5m2-grads": (("mxfp8", {"profile": "transformer-engine"}), ("mxfp8", {"profile": "transformer-engine"}),
                         ("mxfp8_e5m2", {"profile": "transformer-engine"})),
    "nvfp4": (("nvfp4", {"profile": "transformer-engine"}), ("nvfp4-2d", {"profile": "transformer-engine"}),
              ("nvfp4", {"profile": "transformer-engine", "rounding": "sr"})),
    "fp8-current": (("fp8-tensor-current", {"profile": "transformer-engine"}),
                    ("fp8-tensor-current", {"profile": "transformer-engine"}),
                    ("fp8-tensor-current", {"profile": "transformer-engine", "elem": "e5m2"})),
    "fp8-delayed": (("fp8-tensor-current", {"profile": "transformer-engine"}),
                    ("fp8-tensor-current", {"profile": "transformer-engine"}),
                    ("fp8-tensor-current", {"profile": "transformer-engine", "elem": "e5m2"})),
    "fp8-blockwise": (("fp8-block1x128", {"profile": "transformer-engine", "rule": "fp32-pow2"}),
                      ("fp8-block128x128", {"profile": "transformer-engine", "rule": "fp32-pow2"}),
                      ("fp8-block1x128", {"profile": "transformer-engine", "rule": "fp32-pow2"})),
    "quartet": (("mxfp4", {"profile": "ocp"}), ("mxfp4", {"profile": "ocp"}), ("mxfp4", {"profile": "ocp"})),
}
FAKE_RECIPES = ("mxfp8", "mxfp8-ocp", "nvfp4", "quartet")


def load_corpus(path):
    """The corpus bytes: a file, or every file without an extension in a directory, in name order."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if "." not in n and os.path.isfile(os.path.join(path, n)))
        if not names:
            raise SystemExit("train.py: no corpus files in %s" % path)
        data = b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    elif os.path.isfile(path):
        names = [os.path.basename(path)]
        data = open(path, "rb").read()
    else:
        raise SystemExit("train.py: no corpus at %s (Debian: apt-get install fortunes; or pass --corpus)" % path)
    return np.frombuffer(data, dtype=np.uint8), names


# ------------------------------------------------------------------ the model

class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, context, vocab=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "fc2.weight")) else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _repo_relative(path):
    """A path inside this repository relative to its root (the sidecar names no machine's folders)."""
    full = os.path.abspath(path)
    return os.path.relpath(full, REPO) if os.path.exists(full) and full.startswith(REPO + os.sep) else path


# ------------------------------------------------------------------ fake-quant emulation

def fake_quantize(t, spec, seed=None):
    """dequantize(quantize(t)) by qmx's quantizer along t's rows, as a float32 tensor on t's device."""
    name, kw = spec
    kw = dict(kw)
    if seed is not None and kw.get("rounding") == "sr":
        kw["seed"] = seed
    t = t.detach().float().contiguous()
    if t.is_cuda:
        return qmx.quantize(t, name, **kw).dequantize()
    return torch.from_numpy(qmx.fake_quantize(t.numpy(), name, **kw))


def bf16_mm(a, b):
    """a @ b in BF16 with FP32 accumulation (PyTorch's BF16 GEMM), as float32."""
    return (a.to(torch.bfloat16) @ b.to(torch.bfloat16)).float()


def hadamard_matrix(n, device):
    """The n x n Sylvester Hadamard matrix over sqrt(n), in FP64 (symmetric and orthonormal)."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(n)).to(device)


def block_hadamard(t, block, signs=None, inverse=False):
    """Each run of `block` elements along t's rows times H D (inverse: D H), in FP64, rounded to FP32."""
    v = t.detach().double().reshape(-1, block)
    if signs is not None and not inverse:
        v = v * signs
    v = v @ hadamard_matrix(block, t.device)
    if signs is not None and inverse:
        v = v * signs
    return v.reshape(t.shape).float()


def random_signs(block, seed, device):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2, (block,), generator=g) * 2 - 1).double().to(device)


def floor_log2(v):
    """floor(log2 v) of positive FP32 values, exactly, as an int64 tensor. FP32's own log2 rounds a value just
    below a power of two up to the power's exponent (log2(0.12499999) is -3.0 in FP32), so it runs in FP64,
    where log2 of an FP32 value is never that close to an integer it does not equal."""
    return torch.floor(torch.log2(v.double())).long()


def pow2(e):
    """2^e as FP32, exactly, for an integer tensor e in [-149, 127] (built as FP64 from its bits)."""
    return ((e + 1023) * (1 << 52)).view(torch.float64).float()


def e2m1_round(v, u=None):
    """v (within +-6) onto the E2M1 grid: to nearest, ties to even, or stochastically with uniforms u."""
    a = v.abs()
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    q = torch.round(a / step) if u is None else torch.floor(a / step + u)
    return torch.sign(v) * torch.clamp(q * step, max=6.0)


def quest_fake(t, group=32, alpha=2.92247856):
    """QuEST as Quartet's forward runs it (scale = std * alpha / 6 + 1e-8 floored to a power of two, RNE with
    clipping), dequantized, and the trust mask |x / scale| < 6."""
    g = t.reshape(-1, group)
    std = g.double().std(dim=1, unbiased=False, keepdim=True)
    scale = pow2(floor_log2((std * (alpha / 6.0) + 1e-8).float()))
    v = g / scale
    return (e2m1_round(v.clamp(-6.0, 6.0)) * scale).reshape(t.shape), (v.abs() < 6.0).reshape(t.shape)


def quartet_sr_fake(t, gen):
    """Quartet's backward quantizer (per 32: X = 2^(floor(log2 amax) - 2), a UE8M0 scale, so at least 2^-127;
    s = X * 4/3, SR to E2M1), dequantized."""
    g = t.reshape(-1, 32)
    amax = g.abs().amax(dim=1, keepdim=True)
    # Clamped to UE8M0's range: 2^(e - 2) of an amax below 2^-147 is 0 in FP32, and g / 0 is NaN.
    e = torch.clamp(floor_log2(torch.where(amax > 0, amax, torch.ones_like(amax))) - 2, min=-127)
    s = pow2(e) * (4.0 / 3.0)
    u = torch.rand(g.shape, generator=gen, device=t.device)
    return (e2m1_round((g / s).clamp(-6.0, 6.0), u) * s).reshape(t.shape)


class _FakeLinearFn(torch.autograd.Function):
    """The recipe's three GEMMs as fake-quant: each operand made as the faithful recipe makes it (the same
    quantizer, transforms and masks), dequantized, and multiplied by PyTorch in BF16 with FP32 accumulation."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        n, k = weight.shape
        x2 = x.detach().reshape(-1, k).float()
        w = weight.detach().float()
        if layer.recipe == "quartet":  # Hadamard-32 along K, then QuEST; the backward reuses both outputs
            xq, mx = quest_fake(block_hadamard(x2, 32))
            wq, mw = quest_fake(block_hadamard(w, 32))
            y = bf16_mm(xq, wq.t())
            ctx.save_for_backward(xq, wq, mx, mw)
        else:
            sx, sw, _ = FORWARD_SPECS[layer.recipe]
            y = bf16_mm(fake_quantize(x2, sx), fake_quantize(w, sw).t())
            ctx.save_for_backward(x2, w)
        ctx.layer, ctx.x_shape, ctx.has_bias = layer, x.shape, bias is not None
        if bias is not None:
            y = y + bias.detach().float()
        return y.reshape(*x.shape[:-1], n).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        layer = ctx.layer
        seed = layer.seed * 1000003 + layer.step
        layer.step += 1
        if layer.recipe == "quartet":
            xq, wq, mx, mw = ctx.saved_tensors
            dy = grad.detach().reshape(-1, wq.shape[0]).float()
            gen = torch.Generator(device=dy.device).manual_seed(seed)
            # DGRAD along N and WGRAD along the tokens: random Hadamard-32 (the same signs on both operands),
            # SR quantization, the product in the forward's Hadamard domain, QuEST's mask, the inverse transform.
            sn, sm = random_signs(32, 2 * seed, dy.device), random_signs(32, 2 * seed + 1, dy.device)
            dxh = bf16_mm(quartet_sr_fake(block_hadamard(dy, 32, sn), gen),
                          quartet_sr_fake(block_hadamard(wq.t().contiguous(), 32, sn), gen).t())
            dwh = bf16_mm(quartet_sr_fake(block_hadamard(dy.t().contiguous(), 32, sm), gen),
                          quartet_sr_fake(block_hadamard(xq.t().contiguous(), 32, sm), gen).t())
            dx = block_hadamard(dxh * mx, 32, inverse=True)
            dw = block_hadamard(dwh * mw, 32, inverse=True)
        else:
            x2, w = ctx.saved_tensors
            _, sw, sg = FORWARD_SPECS[layer.recipe]
            dy = grad.detach().reshape(-1, w.shape[0]).float()
            # DGRAD: dY along N with W column-wise (W^T's rows); WGRAD: dY^T and X^T along the tokens, after
            # NVFP4's random Hadamard-16 (the same signs on both operands).
            dx = bf16_mm(fake_quantize(dy, sg, seed), fake_quantize(w.t(), sw).t())
            gt, xt = dy.t().contiguous(), x2.t().contiguous()
            if layer.recipe == "nvfp4":
                signs = random_signs(16, seed, dy.device)
                gt, xt = block_hadamard(gt, 16, signs), block_hadamard(xt, 16, signs)
            dw = bf16_mm(fake_quantize(gt, sg, seed + 1), fake_quantize(xt, FORWARD_SPECS[layer.recipe][0]).t())
        db = dy.sum(0) if ctx.has_bias else None
        return dx.reshape(ctx.x_shape), dw, db, None


class FakeQuantLinear(nn.Linear):
    """nn.Linear whose three GEMMs run the fake-quant emulation of a recipe (module docstring)."""

    def __init__(self, src, recipe, seed):
        super().__init__(src.in_features, src.out_features, bias=src.bias is not None, device=src.weight.device)
        self.weight, self.bias = src.weight, src.bias
        self.recipe, self.seed, self.step = recipe, seed, 0

    def forward(self, x):
        return _FakeLinearFn.apply(x, self.weight, self.bias, self)


def swap_fake(model, recipe):
    count = [0]

    def swap(module):
        for name, child in module.named_children():
            if type(child) is nn.Linear:
                setattr(module, name, FakeQuantLinear(child, recipe, count[0]))
                count[0] += 1
            else:
                swap(child)
    swap(model)
    return model


# ------------------------------------------------------------------ statistics

def kurtosis(x):
    x = x.double().flatten()
    c = x - x.mean()
    v = (c * c).mean()
    return float((c ** 4).mean() / (v * v)) if v > 0 else float("nan")


def sqnr_db(ref, out):
    err = ((ref - out) ** 2).sum()
    sig = (ref ** 2).sum()
    return float("inf") if err == 0 else float(10 * torch.log10(sig / err))


def quant_counts(t, spec):
    """Saturated and flushed elements of t under a qmx spec (qmx.quantize_stats on the host; a CUDA tensor is
    quantized by the engine first, bit for bit the host's codes, and only the counting runs on the host)."""
    name, kw = spec
    kw = {k: v for k, v in kw.items() if k != "rounding"}
    x = t.detach().float().contiguous()
    a = x.cpu().numpy()
    q = qmx.quantize(x, name, **kw).cpu() if x.is_cuda else qmx.quantize(a, name, **kw)
    s = qmx.quantize_stats(a, q)
    return s["saturated"], s["flushed_to_zero"]


# ------------------------------------------------------------------ the run

def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="mxfp8")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--corpus", default=CORPUS, help="a text file or a directory of them (default: Debian's fortunes)")
    p.add_argument("--layers", type=int, default=7)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=16, help="contexts per step (tokens per step: batch x context)")
    p.add_argument("--steps", type=int, default=10000, help="at most this many steps")
    p.add_argument("--minutes", type=float, default=5.0, help="and at most this wall time of training")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--stats-every", type=int, default=50)
    p.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    return p.parse_args(argv)


def main(argv=None):
    a = parse(argv)
    recipe = a.recipe
    fake = recipe.startswith("fake:")
    base = recipe[5:] if fake else recipe
    if fake and base not in FAKE_RECIPES:
        raise SystemExit("train.py: the fake-quant emulation covers %s, not %r" % (", ".join(FAKE_RECIPES), base))
    if not fake and base not in ("fp32", "bf16") and base not in qmx.recipe_names():
        raise SystemExit("train.py: unknown recipe %r (fp32, bf16, %s, fake:...)" % (recipe, ", ".join(qmx.recipe_names())))
    dev = torch.device(a.device)
    if dev.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    data, files = load_corpus(a.corpus)
    split = int(len(data) * 0.9)
    train, val = torch.from_numpy(data[:split].astype(np.int64)), torch.from_numpy(data[split:].astype(np.int64))
    if len(val) <= a.context + 1:
        raise SystemExit("train.py: the corpus (%d bytes) is too short for a context of %d" % (len(data), a.context))

    torch.manual_seed(a.seed)
    model = Gpt(a.layers, a.width, a.heads, a.context)
    params = sum(p.numel() for p in model.parameters())
    if fake:
        swap_fake(model, base)
    elif base not in ("fp32", "bf16"):
        qt.swap_linear(model, recipe=base, seed=a.seed)
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(a.seed)  # the batches: the same on every recipe and device

    def batch(src, g):
        i = torch.randint(0, len(src) - a.context - 1, (a.batch,), generator=g)
        x = torch.stack([src[j:j + a.context] for j in i.tolist()])
        y = torch.stack([src[j + 1:j + 1 + a.context] for j in i.tolist()])
        return x.to(dev), y.to(dev)

    def loss_of(x, y):
        if base == "bf16" and not fake:
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                logits = model(x)
        else:
            logits = model(x)
        return F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))

    def evaluate():
        g = torch.Generator().manual_seed(12345)  # the same validation contexts at every evaluation
        model.eval()
        with torch.no_grad():
            total = sum(float(loss_of(*batch(val, g))) for _ in range(a.eval_batches))
        model.train()
        return total / a.eval_batches

    # Per-layer statistics: each Linear's input and output captured by a hook on a stats step.
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    captured = {}

    def hook(name):
        def f(m, inp, out):
            if capture[0]:
                captured[name] = (inp[0].detach(), out.detach())
        return f
    capture = [False]
    for n, m in linears:
        m.register_forward_hook(hook(n))

    name = "%s-s%d" % (recipe.replace(":", "-"), a.seed)
    os.makedirs(a.out, exist_ok=True)
    rows, layer_rows = [], []
    t0 = time.perf_counter()
    step = 0
    specs = FORWARD_SPECS.get(base)
    while step < a.steps and (time.perf_counter() - t0) < a.minutes * 60:
        lr = a.lr * min(1.0, (step + 1) / a.warmup)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batch(train, gen)
        capture[0] = a.stats_every > 0 and step % a.stats_every == 0
        loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        # The layers' statistics before opt.step(): the weights and biases the forward used.
        if capture[0]:
            for n, m in linears:
                inp, out = captured[n]
                x2 = inp.reshape(-1, m.in_features).double()
                ref = x2 @ m.weight.detach().double().t()
                got = out.reshape(-1, m.out_features).double() - (m.bias.detach().double() if m.bias is not None else 0)
                r = {"step": step, "layer": n, "gemm_sqnr_db": sqnr_db(ref, got), "x_kurtosis": kurtosis(inp)}
                if specs:
                    r["x_saturated"], r["x_flushed"] = quant_counts(inp.reshape(-1, m.in_features), specs[0])
                    r["w_saturated"], r["w_flushed"] = quant_counts(m.weight, specs[1])
                layer_rows.append(r)
            captured.clear()
        opt.step()
        row = {"step": step, "tokens": (step + 1) * a.batch * a.context, "lr": lr, "train_loss": float(loss.detach()),
               "val_loss": "", "seconds": time.perf_counter() - t0}
        if not math.isfinite(row["train_loss"]):
            print("step %d: the loss is %s; stopping" % (step, row["train_loss"]))
            rows.append(row)
            break
        if a.eval_every > 0 and (step % a.eval_every == 0 or step + 1 == a.steps):
            row["val_loss"] = evaluate()
            print("%s step %5d  train %.4f  val %.4f  %.0f s" % (name, step, row["train_loss"], row["val_loss"],
                                                                 row["seconds"]), flush=True)
        rows.append(row)
        step += 1
    final_val = evaluate()

    with open(os.path.join(a.out, name + ".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "tokens", "lr", "train_loss", "val_loss", "seconds"])
        w.writeheader()
        w.writerows(rows)
    if layer_rows:
        with open(os.path.join(a.out, name + "-layers.csv"), "w", newline="") as f:
            keys = list(layer_rows[0].keys())
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(layer_rows)
    meta = {
        "command": "python3 notebooks-data/training/train.py " + " ".join(
            _repo_relative(v) for v in (argv if argv is not None else sys.argv[1:])),
        "recipe": recipe, "seed": a.seed,
        "config": {k: _repo_relative(v) if k == "corpus" else v for k, v in vars(a).items() if k not in ("out",)},
        "parameters": params, "corpus": {"path": _repo_relative(a.corpus), "files": files, "bytes": int(len(data)),
                                         "train_bytes": int(split), "package": "fortunes (Debian)"},
        "steps": step, "tokens": step * a.batch * a.context, "seconds": time.perf_counter() - t0,
        "final_train_loss": rows[-1]["train_loss"] if rows else None, "final_val_loss": final_val,
        "versions": {"qmx": qmx.__version__, "torch": torch.__version__, "python": platform.python_version(),
                     "numpy": np.__version__},
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu: " + platform.processor(),
    }
    with open(os.path.join(a.out, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("%s: %d steps, %d parameters, final validation loss %.4f" % (name, step, params, final_val))
    return meta


if __name__ == "__main__":
    main()
