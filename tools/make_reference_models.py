#!/usr/bin/env python3
"""Make the small reference models that kiln's tests check against.

For each model this writes, under --out (default tests/models):

    <name>/model.onnx               exported by torch.onnx.export, default opset
    <name>/inputs/<input>.npy       the inputs (float32, or int64 for token ids)
    <name>/outputs/<output>.npy     PyTorch's outputs for those inputs (float32)

The models are compact reimplementations, at small widths and with random
weights, of the networks kiln runs: an SD-style UNet, an SD-style VAE decoder, a
CLIP-style text encoder and a DiT (plus `dit_tiny`, the dispatch-bound DiT used
for benchmarks). They are the oracles: kiln's eager and graph outputs for the
same inputs must match outputs/*.npy within max abs error
<= 1e-4 * max|reference|.

The reference outputs are computed in float64 (the same module, cast to double)
and rounded to float32, so they carry no float32 rounding of their own; the
summary prints how far PyTorch's own float32 run is from them, which is the
noise floor a float32 runtime can expect.

Everything is deterministic (one seed per model): running the script twice
writes identical .npy files. Regenerate with
    /usr/bin/python3 tools/make_reference_models.py [--only unet dit ...]
Needs torch (1.13), onnx and numpy; nothing else.
"""
import argparse
import collections
import math
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

# Ops kiln's importer accepts; an export that uses anything else is an error.
KILN_OPS = set("""
MatMul Gemm Conv ConvTranspose Add Sub Mul Div Pow Sqrt Reciprocal Neg Abs Exp
Log Erf Tanh Sigmoid Relu LeakyRelu Clip Min Max Softmax LayerNormalization
InstanceNormalization ReduceMean ReduceSum ReduceMax Reshape Flatten Transpose
Concat Split Slice Gather GatherElements Unsqueeze Squeeze Expand Tile Pad Where
Equal Less Greater Not Cast Shape ConstantOfShape Range Resize Einsum Cos Sin
ArgMax CumSum Trilu Identity Dropout Constant""".split())


# ---------------------------------------------------------------- shared parts

def timestep_embedding(t, dim):
    """Sinusoidal embedding of a float timestep vector [B] -> [B, dim], cos
    half first (SD's flip_sin_to_cos=True, and DiT)."""
    half = dim // 2
    # The frequencies depend on nothing but `dim`, so the export folds them to
    # a constant; only Unsqueeze, Mul, Cos, Sin and Concat remain in the graph.
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=t.dtype) / half)
    args = t[:, None] * freqs[None, :]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Attention(nn.Module):
    """Multi-head attention written out op by op (torch 1.13 has no SDPA):
    q/k/v Linear, split heads, q @ k^T * scale, optional additive mask,
    softmax, @ v, merge heads, out Linear."""

    def __init__(self, dim, heads, context_dim=None, qkv_bias=False):
        super().__init__()
        context_dim = context_dim or dim
        # head_dim is a Python int so the export needs no shape arithmetic for it.
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.k = nn.Linear(context_dim, dim, bias=qkv_bias)
        self.v = nn.Linear(context_dim, dim, bias=qkv_bias)
        self.out = nn.Linear(dim, dim)

    def split_heads(self, x):  # [B, N, C] -> [B, heads, N, C/heads]
        b, n, _ = x.shape
        return x.reshape(b, n, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q, k, v = (self.split_heads(f(y)) for f, y in ((self.q, x), (self.k, context), (self.v, context)))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        if mask is not None:
            scores = scores + mask
        h = torch.matmul(scores.softmax(dim=-1), v)  # [B, heads, N, d]
        b, _, n, _ = h.shape
        return self.out(h.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


def group_norm(c, eps=1e-5):
    # SD uses 32 groups; these widths are small, so 8 groups keep >= 4 channels each.
    return nn.GroupNorm(min(8, c), c, eps=eps)


class ResnetBlock(nn.Module):
    """GroupNorm, SiLU, Conv3x3 twice; optional time-embedding injection;
    1x1 conv on the skip when the channel count changes."""

    def __init__(self, cin, cout, temb_dim=None):
        super().__init__()
        self.norm1, self.conv1 = group_norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.temb_proj = nn.Linear(temb_dim, cout) if temb_dim else None
        self.norm2, self.conv2 = group_norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb=None):
        h = self.conv1(F.silu(self.norm1(x)))
        if self.temb_proj is not None:
            h = h + self.temb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class Downsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


class Upsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


# ------------------------------------------------------------------------ UNet

class GEGLU(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.proj = nn.Linear(dim, inner * 2)

    def forward(self, x):
        a, gate = self.proj(x).chunk(2, dim=-1)
        return a * F.gelu(gate)  # exact GELU, as SD: exports through Erf


class TransformerBlock(nn.Module):
    """SD's BasicTransformerBlock: pre-LN self-attention, cross-attention, GEGLU FF."""

    def __init__(self, dim, heads, context_dim):
        super().__init__()
        self.norm1, self.attn1 = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2, self.attn2 = nn.LayerNorm(dim), Attention(dim, heads, context_dim)
        self.norm3, self.ff = nn.LayerNorm(dim), nn.Sequential(GEGLU(dim, 4 * dim), nn.Linear(4 * dim, dim))

    def forward(self, x, context):
        x = x + self.attn1(self.norm1(x))
        x = x + self.attn2(self.norm2(x), context)
        return x + self.ff(self.norm3(x))


class SpatialTransformer(nn.Module):
    """GroupNorm, 1x1 proj_in, [B,C,H,W] -> [B,HW,C], transformer block, back, proj_out, residual."""

    def __init__(self, c, heads, context_dim):
        super().__init__()
        self.norm = group_norm(c, eps=1e-6)
        self.proj_in, self.proj_out = nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1)
        self.block = TransformerBlock(c, heads, context_dim)

    def forward(self, x, context):
        b, c, h, w = x.shape
        y = self.proj_in(self.norm(x)).reshape(b, c, h * w).transpose(1, 2)
        y = self.block(y, context).transpose(1, 2).reshape(b, c, h, w)
        return x + self.proj_out(y)


class NoTransformer(nn.Module):
    """A level without attention: passes the features through."""

    def forward(self, x, context):
        return x


class UNet(nn.Module):
    """SD-style UNet, one ResNet + transformer per level on the way down, two on
    the way up (SD's layers_per_block + 1), skips concatenated on the way up.
    Widths (16, 32) rather than (32, 64) keep the file under 2 MB. attention
    says per level whether it has the transformers (SD 1.5 leaves them out of
    its lowest-resolution level; a small model trained on a CPU leaves them out
    of its highest, where self-attention costs the most)."""

    def __init__(self, in_ch=4, chans=(16, 32), heads=2, context_dim=32, attention=None):
        super().__init__()
        attention = attention or (True,) * len(chans)

        def transformer(level, c):
            return SpatialTransformer(c, heads, context_dim) if attention[level] else NoTransformer()

        c0, temb = chans[0], chans[0] * 4
        self.chans = chans
        self.conv_in = nn.Conv2d(in_ch, c0, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(c0, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.down = nn.ModuleList()
        skip_chans, c = [c0], c0
        for i, cout in enumerate(chans):
            last = i == len(chans) - 1
            self.down.append(nn.ModuleList([ResnetBlock(c, cout, temb), transformer(i, cout),
                                            nn.Identity() if last else Downsample(cout)]))
            c = cout
            skip_chans += [cout] if last else [cout, cout]
        self.mid = nn.ModuleList([ResnetBlock(c, c, temb), SpatialTransformer(c, heads, context_dim),
                                  ResnetBlock(c, c, temb)])
        self.up = nn.ModuleList()
        for i, cout in reversed(list(enumerate(chans))):
            layers = nn.ModuleList()
            for _ in range(2):
                layers.append(ResnetBlock(c + skip_chans.pop(), cout, temb))
                layers.append(transformer(i, cout))
                c = cout
            layers.append(Upsample(cout) if i > 0 else nn.Identity())
            self.up.append(layers)
        self.norm_out, self.conv_out = group_norm(c), nn.Conv2d(c, in_ch, 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states):
        ctx = encoder_hidden_states
        temb = self.time_mlp(timestep_embedding(timestep, self.chans[0]))
        h = self.conv_in(sample)
        skips = [h]
        for res, attn, down in self.down:
            h = attn(res(h, temb), ctx)
            skips.append(h)
            if not isinstance(down, nn.Identity):
                h = down(h)
                skips.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, temb), ctx), temb)
        for layers in self.up:
            for j in range(0, len(layers) - 1, 2):
                h = layers[j + 1](layers[j](torch.cat([h, skips.pop()], dim=1), temb), ctx)
            h = layers[-1](h)
        return self.conv_out(F.silu(self.norm_out(h)))


# ----------------------------------------------------------------- VAE decoder

class VaeAttention(nn.Module):
    """The VAE mid block's single-head self-attention over the H*W positions."""

    def __init__(self, c):
        super().__init__()
        self.norm = group_norm(c, eps=1e-6)
        self.attn = Attention(c, heads=1, qkv_bias=True)

    def forward(self, x):
        b, c, h, w = x.shape
        y = self.norm(x).reshape(b, c, h * w).transpose(1, 2)
        return x + self.attn(y).transpose(1, 2).reshape(b, c, h, w)


class VaeDecoder(nn.Module):
    """SD-style decoder: conv_in, mid (ResNet, attention, ResNet), up blocks of
    ResNets each followed by nearest-2x + conv, GroupNorm, SiLU, conv_out.
    SD's last up block has no upsample; here every block upsamples so that two
    small blocks reach 4x the latent size."""

    def __init__(self, latent_ch=4, chans=(64, 32), out_ch=3, resnets_per_block=2):
        super().__init__()
        c = chans[0]
        self.conv_in = nn.Conv2d(latent_ch, c, 3, padding=1)
        self.mid = nn.Sequential(ResnetBlock(c, c), VaeAttention(c), ResnetBlock(c, c))
        ups = []
        for cout in chans:
            for _ in range(resnets_per_block):
                ups.append(ResnetBlock(c, cout))
                c = cout
            ups.append(Upsample(cout))
        self.up = nn.Sequential(*ups)
        self.norm_out, self.conv_out = group_norm(c, eps=1e-6), nn.Conv2d(c, out_ch, 3, padding=1)

    def forward(self, latent):
        h = self.up(self.mid(self.conv_in(latent)))
        return self.conv_out(F.silu(self.norm_out(h)))


# ---------------------------------------------------------------- text encoder

class ClipLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(dim), Attention(dim, heads, qkv_bias=True)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        h = self.fc1(self.ln2(x))
        return x + self.fc2(h * torch.sigmoid(1.702 * h))  # quick_gelu


class TextEncoder(nn.Module):
    """CLIP text model: token + learned position embedding, pre-LN causal
    transformer, final LayerNorm; pooled output taken at the argmax token id
    (CLIP's end-of-text token has the largest id)."""

    def __init__(self, vocab=1000, dim=64, heads=2, layers=2, max_len=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.register_buffer("position_ids", torch.arange(max_len)[None, :])
        self.layers = nn.ModuleList(ClipLayer(dim, heads) for _ in range(layers))
        self.final_ln = nn.LayerNorm(dim)

    def forward(self, input_ids):
        b, n = input_ids.shape
        x = self.tok(input_ids) + self.pos(self.position_ids[:, :n])
        # As HF CLIP builds it: the most negative float above the diagonal, 0 on
        # and below, broadcast over batch and heads.
        mask = torch.full((n, n), torch.finfo(x.dtype).min, dtype=x.dtype).triu(1)[None, None]
        for layer in self.layers:
            x = layer(x, mask)
        x = self.final_ln(x)
        pooled = x[torch.arange(b), input_ids.argmax(dim=-1)]
        return x, pooled


# ------------------------------------------------------------------------- DiT

def sincos_pos_embed(dim, grid):
    """DiT's fixed 2D sin-cos position embedding, [grid*grid, dim]."""
    def one_axis(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.outer(pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)
    gw, gh = np.meshgrid(np.arange(grid, dtype=np.float64), np.arange(grid, dtype=np.float64))
    return torch.from_numpy(np.concatenate([one_axis(dim // 2, gw), one_axis(dim // 2, gh)], axis=1)).float()


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
    """adaLN-Zero block (the modulation is random here, not zero, so that every
    path contributes to the output)."""

    def __init__(self, dim, heads, mlp_ratio=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(dim, heads, qkv_bias=True)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(mlp_ratio * dim, dim))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x, c):
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(c).chunk(6, dim=1)
        x = x + gate1[:, None] * self.attn(modulate(self.norm1(x), shift1, scale1))
        return x + gate2[:, None] * self.mlp(modulate(self.norm2(x), shift2, scale2))


class DiT(nn.Module):
    """Patch embed + fixed pos-embed, timestep MLP as the conditioning, adaLN
    blocks, adaLN final layer, unpatchify. No class labels; out_ch = in_ch
    (learn_sigma off), so the output is a noise prediction shaped like x."""

    def __init__(self, in_ch=4, size=16, patch=2, dim=64, depth=4, heads=4, freq_dim=256):
        super().__init__()
        self.in_ch, self.patch, self.grid, self.freq_dim = in_ch, patch, size // patch, freq_dim
        self.patch_embed = nn.Conv2d(in_ch, dim, patch, stride=patch)
        self.register_buffer("pos_embed", sincos_pos_embed(dim, self.grid)[None])
        self.t_embed = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList(DiTBlock(dim, heads) for _ in range(depth))
        self.norm_final = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ada_final = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.linear_final = nn.Linear(dim, patch * patch * in_ch)

    def forward(self, x, t):
        b = x.shape[0]
        h = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed  # [B, T, dim]
        c = self.t_embed(timestep_embedding(t, self.freq_dim))
        for block in self.blocks:
            h = block(h, c)
        shift, scale = self.ada_final(c).chunk(2, dim=1)
        h = self.linear_final(modulate(self.norm_final(h), shift, scale))  # [B, T, p*p*C]
        g, p, ch = self.grid, self.patch, self.in_ch
        h = h.reshape(b, g, g, p, p, ch).permute(0, 5, 1, 3, 2, 4)  # n h w p q c -> n c h p w q
        return h.reshape(b, ch, g * p, g * p)


# ---------------------------------------------------------------------- models

def adjust_init(model, gen):
    """torch's default init, changed where it would make a weak oracle.
    Norm affine params default to 1 and 0, which would hide a runtime that
    swaps or drops them: make them 1 +- 0.1 and +- 0.1. Attention scores come
    out with std ~0.3, nearly uniform attention that barely notices a wrong
    scale or softmax axis: doubling q and k brings them to std ~1."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.LayerNorm, nn.GroupNorm)) and m.weight is not None:
                m.weight.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
            if isinstance(m, Attention):
                m.q.weight.mul_(2)
                m.k.weight.mul_(2)


def make_unet(gen):
    model = UNet()
    inputs = {"sample": torch.randn(2, 4, 16, 16, generator=gen),
              "timestep": torch.tensor([981.0, 1.0]),
              "encoder_hidden_states": torch.randn(2, 8, 32, generator=gen)}
    axes = {"sample": {0: "batch", 2: "height", 3: "width"}, "timestep": {0: "batch"},
            "encoder_hidden_states": {0: "batch", 1: "sequence"},
            "out_sample": {0: "batch", 2: "height", 3: "width"}}
    return model, inputs, ["out_sample"], axes


def make_vae_decoder(gen):
    model = VaeDecoder()
    inputs = {"latent": torch.randn(1, 4, 8, 8, generator=gen)}
    axes = {"latent": {0: "batch", 2: "height", 3: "width"}, "image": {0: "batch", 2: "height4", 3: "width4"}}
    return model, inputs, ["image"], axes


def make_text_encoder(gen):
    model = TextEncoder()
    with torch.no_grad():  # CLIP initializes token embeddings with std 0.02, not 1
        model.tok.weight.mul_(0.02)
        model.pos.weight.mul_(0.01)
    # Like a tokenized prompt: BOS (998), words, EOS (999, the largest id),
    # padded with EOS as CLIP's tokenizer pads; the two prompts differ in length.
    ids = torch.full((2, 16), 999, dtype=torch.int64)
    ids[:, 0] = 998
    ids[0, 1:6] = torch.randint(1, 998, (5,), generator=gen)
    ids[1, 1:12] = torch.randint(1, 998, (11,), generator=gen)
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "last_hidden_state": {0: "batch", 1: "sequence"},
            "pooler_output": {0: "batch"}}
    return model, {"input_ids": ids}, ["last_hidden_state", "pooler_output"], axes


def make_dit(gen, size=16, depth=4):
    model = DiT(size=size, depth=depth)
    inputs = {"x": torch.randn(2, 4, size, size, generator=gen), "t": torch.tensor([999.0, 250.0])}
    return model, inputs, ["out"], {"x": {0: "batch"}, "t": {0: "batch"}, "out": {0: "batch"}}


MODELS = {  # name: (maker, one line for the README)
    "unet": (make_unet, "SD-style UNet: widths (16, 32), 2 levels, ResNet blocks with time embedding, "
             "spatial transformers (self- and cross-attention, GEGLU), skip concat, 2 heads; height and width even."),
    "vae_decoder": (make_vae_decoder, "SD-style VAE decoder: mid block (ResNet, single-head spatial attention, "
                    "ResNet), two up blocks (64, 32) each ending in nearest-2x + conv (SD's last block has none), "
                    "latent 4x8x8 -> image 3x32x32."),
    "text_encoder": (make_text_encoder, "CLIP-style text encoder: vocab 1000, width 64, 2 pre-LN causal layers, "
                     "2 heads, quick_gelu, sequence <= 16; pooled output gathered at argmax(input_ids), which has ties "
                     "(EOS padding): the first index wins, as in torch and ONNX ArgMax's default."),
    "dit": (make_dit, "DiT: patch 2 on 4x16x16 (64 tokens), hidden 64, depth 4, 4 heads, adaLN (random, not "
            "zero) modulation, tanh-GELU MLP x4, unpatchify to 4x16x16."),
    # 16 tokens: small enough that per-op dispatch, not arithmetic, dominates.
    "dit_tiny": (lambda gen: make_dit(gen, size=8, depth=6),
                 "the benchmark DiT: same code as dit, 4x8x8 input (16 tokens), depth 6."),
}


# ---------------------------------------------------------------------- export

def save_npy(path, tensor):
    arr = tensor.detach().numpy()
    arr = arr.astype(np.int64 if arr.dtype.kind in "iu" else np.float32)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, arr)
    return arr


def build(name, out_dir):
    torch.manual_seed(0)  # the weights: torch's default init, in a fixed order
    gen = torch.Generator().manual_seed(1)  # norm params and inputs
    model, inputs, output_names, axes = MODELS[name][0](gen)
    adjust_init(model, gen)
    model.eval()
    args = tuple(inputs.values())
    folder = os.path.join(out_dir, name)
    path = os.path.join(folder, "model.onnx")
    os.makedirs(folder, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=list(inputs), output_names=output_names,
                          dynamic_axes=axes)
        out32 = model(*args)
        # The oracle: the same weights and inputs in float64, rounded once at the
        # end (model.double() converts in place, so this comes after the export).
        to64 = lambda v: v.double() if v.is_floating_point() else v
        out64 = model.double()(*(to64(a) for a in args))
    out32 = out32 if isinstance(out32, tuple) else (out32,)
    out64 = out64 if isinstance(out64, tuple) else (out64,)

    onnx_model = onnx.load(path)
    onnx.checker.check_model(onnx_model, full_check=True)
    graph_inputs = [i.name for i in onnx_model.graph.input]
    graph_outputs = [o.name for o in onnx_model.graph.output]
    assert graph_inputs == list(inputs), f"{name}: graph inputs {graph_inputs} != {list(inputs)}"
    assert graph_outputs == output_names, f"{name}: graph outputs {graph_outputs}"
    ops = collections.Counter(n.op_type for n in onnx_model.graph.node)

    for k, v in inputs.items():
        save_npy(os.path.join(folder, "inputs", k + ".npy"), v)
    opset = next(o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx"))
    print(f"== {name}: opset {opset}, {os.path.getsize(path) / 1e6:.2f} MB, "
          f"{sum(p.numel() for p in model.parameters())} params, {len(onnx_model.graph.node)} nodes")
    print("   ops: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
    for k, v in inputs.items():
        print(f"   in  {k}: {list(v.shape)} {str(v.dtype).replace('torch.', '')}")
    for k, o32, o64 in zip(output_names, out32, out64):
        ref = save_npy(os.path.join(folder, "outputs", k + ".npy"), o64)
        peak = float(np.abs(ref).max())
        err32 = float((o32.double() - o64).abs().max()) / peak
        print(f"   out {k}: {list(ref.shape)} max|out| {peak:.4g}, mean|out| {np.abs(ref).mean():.4g}, "
              f"torch float32 error {err32:.2e} x max|out|")
        assert 0.1 <= peak <= 100, f"{name}/{k}: max|out| {peak} out of range; rescale the init"
    unsupported = sorted(set(ops) - KILN_OPS)
    if unsupported:
        print(f"   ERROR: ops kiln does not support: {unsupported}")
    return not unsupported


def describe(value, folder):
    """README text for a graph input or output: its dims in the graph and the stored array."""
    dims = ", ".join(str(d.dim_param or d.dim_value) for d in value.type.tensor_type.shape.dim)
    stored = np.load(os.path.join(folder, value.name + ".npy"))
    return f"`{value.name}` [{dims}] {stored.dtype}, stored {list(stored.shape)}"


def write_readme(out_dir):
    """tests/models/README.md, computed from the model files so it cannot go stale."""
    lines = ["# Reference models", "",
             "Small random-weight models and their PyTorch outputs: the oracles kiln's eager and graph",
             "outputs are compared to (max abs error <= 1e-4 * max|reference|). Generated, do not edit;",
             "regenerate with `/usr/bin/python3 tools/make_reference_models.py` (deterministic: same files",
             "every run). Layout: `<name>/model.onnx`, `<name>/inputs/<input>.npy`,",
             "`<name>/outputs/<output>.npy`. References are computed in float64 and stored as float32.", "",
             "Exported by torch.onnx.export with its default opset, which has no LayerNormalization: LayerNorm",
             "appears as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add; GroupNorm as Reshape,",
             "InstanceNormalization, Reshape, Mul, Add; exact GELU through Erf; tanh GELU as Mul/Tanh;",
             "SiLU as Sigmoid, Mul. Dynamic dims (`batch`, ...) bring int64 shape arithmetic",
             "(Shape, Gather, Unsqueeze, Concat, Add, Div, Mul, Slice) ahead of Reshape and Slice.", ""]
    for name, (_, about) in MODELS.items():
        path = os.path.join(out_dir, name, "model.onnx")
        if not os.path.exists(path):
            continue
        m = onnx.load(path)
        opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        ops = collections.Counter(n.op_type for n in m.graph.node)
        lines += [f"## {name}", "", about, "",
                  f"- file: {os.path.getsize(path) / 1e6:.2f} MB, opset {opset}, {len(m.graph.node)} nodes",
                  "- inputs: " + "; ".join(describe(v, os.path.join(out_dir, name, "inputs")) for v in m.graph.input),
                  "- outputs: " + "; ".join(describe(v, os.path.join(out_dir, name, "outputs"))
                                            for v in m.graph.output),
                  "- ops: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())), ""]
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/models", help="output folder (default: tests/models)")
    parser.add_argument("--only", nargs="+", choices=list(MODELS), metavar="NAME",
                        help="build only these models: " + ", ".join(MODELS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    ok = all([build(name, args.out) for name in args.only or MODELS])
    write_readme(args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
