"""Wan2.2's diffusion transformer (the TI2V-5B DiT) in plain PyTorch, its
modules named as diffusers' WanTransformer3DModel names them, its semantics
those of Wan's wan/modules/model.py ([W]).

    model = WanTransformer3DModel(config)          # diffusers transformer/config.json fields
    out = model(latents, timestep, context, first_frame_clean=False)
    # latents [B, C, F, H, W], timestep [B], context [B, 512, text_dim] -> [B, C_out, F, H, W]
    original = to_original_names(model.state_dict())   # [W] / Comfy names, same shapes

Per-token timesteps (TI2V): every token gets timestep[b], except that with
first_frame_clean the tokens of latent frame 0 get 0 (image-to-video). The
time MLP therefore runs per token: temb [B, L, dim] feeds the head's
modulation, its projection [B, L, 6, dim] the blocks'.

Block (x is the fp32 residual stream; LN = LayerNorm without affine, eps):
    shift1, scale1, gate1, shift2, scale2, gate2 = scale_shift_table + projection
    h = LN(x) * (1 + scale1) + shift1
    x = x + SelfAttn(h) * gate1          q, k: RMSNorm over all heads, then 3-D RoPE
    x = x + CrossAttn(norm2(x), context) norm2 affine; q, k RMSNorm; no RoPE, no mask
    x = x + FFN(LN(x) * (1 + scale2) + shift2) * gate2   Linear, tanh-GELU, Linear

RoPE: head_dim d splits into d - 4(d//6) dims for the frame index, 2(d//6)
for the row and 2(d//6) for the column; pairs (2j, 2j+1) of an axis with D
dims rotate by position * 10000^(-2j/D). diffusers slices its table as
[d - 2(d//3), d//3, d//3], equal only when d//3 == 2(d//6) (d = 24, 32, 128;
not d = 16 or 64): the tiny models use such a head size.

Any device works (device="meta" builds a shapes-only model for --full).
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim."""

    def __init__(self, dim, eps, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def layer_norm(x, eps):
    return F.layer_norm(x, x.shape[-1:], eps=eps)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def attention(q, k, v):
    """Softmax attention, scale 1/sqrt(head_dim); q [B, Lq, H, d], k, v [B, Lk, H, d]."""
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).flatten(2)


class MLP(nn.Module):
    """linear_1 -> act -> linear_2 (diffusers' TimestepEmbedding and PixArtAlphaTextProjection)."""

    def __init__(self, dim_in, dim, act, device=None):
        super().__init__()
        self.linear_1 = nn.Linear(dim_in, dim, device=device)
        self.linear_2 = nn.Linear(dim, dim, device=device)
        self.act = act

    def forward(self, x):
        return self.linear_2(self.act(self.linear_1(x)))


class ConditionEmbedder(nn.Module):
    def __init__(self, dim, freq_dim, text_dim, device=None):
        super().__init__()
        self.freq_dim = freq_dim
        self.time_embedder = MLP(freq_dim, dim, F.silu, device)
        self.time_proj = nn.Linear(dim, 6 * dim, device=device)
        self.text_embedder = MLP(text_dim, dim, gelu_tanh, device)

    def sinusoid(self, t):
        """[cos(t f), sin(t f)], f_i = 10000^(-i/half), computed in float64 as [W]."""
        half = self.freq_dim // 2
        freqs = torch.pow(10000.0, -torch.arange(half, dtype=torch.float64) / half)
        args = t.double()[..., None] * freqs
        return torch.cat([args.cos(), args.sin()], -1)

    def forward(self, t, context):
        """t [B, L] -> temb [B, L, dim], projection [B, L, 6, dim]; context -> [B, S, dim]."""
        dtype = self.time_proj.weight.dtype
        temb = self.time_embedder(self.sinusoid(t).to(dtype))
        proj = self.time_proj(F.silu(temb)).unflatten(-1, (6, -1))
        return temb, proj, self.text_embedder(context)


class Attention(nn.Module):
    def __init__(self, dim, heads, eps, device=None):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, device=device)
        self.to_k = nn.Linear(dim, dim, device=device)
        self.to_v = nn.Linear(dim, dim, device=device)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim, device=device)])
        self.norm_q = RMSNorm(dim, eps, device)
        self.norm_k = RMSNorm(dim, eps, device)

    def forward(self, x, context=None, rope=None):
        context = x if context is None else context
        q = self.norm_q(self.to_q(x)).unflatten(-1, (self.heads, -1))
        k = self.norm_k(self.to_k(context)).unflatten(-1, (self.heads, -1))
        v = self.to_v(context).unflatten(-1, (self.heads, -1))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        return self.to_out[0](attention(q, k, v))


class GeluProjection(nn.Module):
    def __init__(self, dim, inner, device=None):
        super().__init__()
        self.proj = nn.Linear(dim, inner, device=device)

    def forward(self, x):
        return gelu_tanh(self.proj(x))


class FeedForward(nn.Module):
    """net.0.proj -> tanh-GELU -> (net.1: dropout) -> net.2, as diffusers names it."""

    def __init__(self, dim, inner, device=None):
        super().__init__()
        self.net = nn.ModuleList([GeluProjection(dim, inner, device), nn.Identity(),
                                  nn.Linear(inner, dim, device=device)])

    def forward(self, x):
        for layer in self.net:
            x = layer(x)
        return x


class WanTransformerBlock(nn.Module):
    def __init__(self, dim, ffn_dim, heads, eps, device=None):
        super().__init__()
        self.eps = eps
        self.attn1 = Attention(dim, heads, eps, device)
        self.attn2 = Attention(dim, heads, eps, device)
        self.norm2 = nn.LayerNorm(dim, eps, elementwise_affine=True, device=device)
        self.ffn = FeedForward(dim, ffn_dim, device)
        self.scale_shift_table = nn.Parameter(torch.randn(1, 6, dim, device=device) / dim ** 0.5)

    def forward(self, x, context, proj, rope):
        shift1, scale1, gate1, shift2, scale2, gate2 = (self.scale_shift_table + proj).unbind(2)
        x = x + self.attn1(layer_norm(x, self.eps) * (1 + scale1) + shift1, rope=rope) * gate1
        x = x + self.attn2(self.norm2(x), context)
        return x + self.ffn(layer_norm(x, self.eps) * (1 + scale2) + shift2) * gate2


def rope_dims(head_dim):
    """Dims of the frame, row and column axes ([W]'s split)."""
    hw = 2 * (head_dim // 6)
    return head_dim - 2 * hw, hw, hw


def rope_tables(head_dim, grid, dtype):
    """cos, sin [L, head_dim / 2] for the tokens of a (f, h, w) grid, row-major;
    angles in float64 as [W] computes them."""
    axes = []
    for n, dim in zip(grid, rope_dims(head_dim)):
        freqs = 1.0 / torch.pow(10000.0, torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        axes.append(torch.arange(n, dtype=torch.float64)[:, None] * freqs)  # [n, dim / 2]
    f, h, w = grid
    angles = torch.cat([axes[0][:, None, None].expand(f, h, w, -1), axes[1][None, :, None].expand(f, h, w, -1),
                        axes[2][None, None, :].expand(f, h, w, -1)], -1).reshape(f * h * w, -1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """Rotate pairs (2j, 2j+1) of x [B, L, H, d] by the token's angles."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[:, None], sin[:, None]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2)


class WanTransformer3DModel(nn.Module):
    def __init__(self, config, device=None):
        super().__init__()
        c = config
        self.config = dict(c)
        self.patch = tuple(c["patch_size"])
        self.heads, self.head_dim = c["num_attention_heads"], c["attention_head_dim"]
        dim = self.heads * self.head_dim
        self.eps = c["eps"]
        assert c["qk_norm"] == "rms_norm_across_heads" and c["cross_attn_norm"], "only Wan2.2 TI2V's options"
        assert c.get("added_kv_proj_dim") is None and c.get("image_dim") is None, "no image K/V (Wan2.1 I2V)"
        self.patch_embedding = nn.Conv3d(c["in_channels"], dim, self.patch, stride=self.patch, device=device)
        self.condition_embedder = ConditionEmbedder(dim, c["freq_dim"], c["text_dim"], device)
        self.blocks = nn.ModuleList([WanTransformerBlock(dim, c["ffn_dim"], self.heads, self.eps, device)
                                     for _ in range(c["num_layers"])])
        self.scale_shift_table = nn.Parameter(torch.randn(1, 2, dim, device=device) / dim ** 0.5)
        self.proj_out = nn.Linear(dim, c["out_channels"] * math.prod(self.patch), device=device)

    def forward(self, hidden_states, timestep, encoder_hidden_states, first_frame_clean=False):
        b, _, frames, height, width = hidden_states.shape
        pt, ph, pw = self.patch
        grid = (frames // pt, height // ph, width // pw)
        x = self.patch_embedding(hidden_states).flatten(2).transpose(1, 2)  # [B, L, dim], (f, h, w) row-major
        t = timestep[:, None].expand(b, x.shape[1]).clone()
        if first_frame_clean:
            assert pt == 1, "first_frame_clean needs a temporal patch of 1"
            t[:, :grid[1] * grid[2]] = 0  # latent frame 0 (pt = 1) is the clean image
        temb, proj, context = self.condition_embedder(t, encoder_hidden_states)
        rope = rope_tables(self.head_dim, grid, x.dtype)
        for block in self.blocks:
            x = block(x, context, proj, rope)
        shift, scale = (self.scale_shift_table + temb[:, :, None]).unbind(2)
        x = self.proj_out(layer_norm(x, self.eps) * (1 + scale) + shift)
        # Each token's vector is [pt, ph, pw, C], C fastest.
        x = x.reshape(b, *grid, pt, ph, pw, -1).permute(0, 7, 1, 4, 2, 5, 3, 6)
        return x.reshape(b, -1, frames, height, width)


# diffusers -> [W] (also Comfy-Org's repack, whose keys add model.diffusion_model.);
# the fact sheet's table 1.8. Note the swap: diffusers' norm2 (cross-attention,
# affine) is [W]'s norm3.
TOP_TO_ORIGINAL = {
    "condition_embedder.text_embedder.linear_1.": "text_embedding.0.",
    "condition_embedder.text_embedder.linear_2.": "text_embedding.2.",
    "condition_embedder.time_embedder.linear_1.": "time_embedding.0.",
    "condition_embedder.time_embedder.linear_2.": "time_embedding.2.",
    "condition_embedder.time_proj.": "time_projection.1.",
    "scale_shift_table": "head.modulation",
    "proj_out.": "head.head.",
    "patch_embedding.": "patch_embedding.",
}
BLOCK_TO_ORIGINAL = {
    "scale_shift_table": "modulation",
    "attn1.to_q.": "self_attn.q.", "attn1.to_k.": "self_attn.k.", "attn1.to_v.": "self_attn.v.",
    "attn1.to_out.0.": "self_attn.o.", "attn1.norm_q.": "self_attn.norm_q.", "attn1.norm_k.": "self_attn.norm_k.",
    "attn2.to_q.": "cross_attn.q.", "attn2.to_k.": "cross_attn.k.", "attn2.to_v.": "cross_attn.v.",
    "attn2.to_out.0.": "cross_attn.o.", "attn2.norm_q.": "cross_attn.norm_q.", "attn2.norm_k.": "cross_attn.norm_k.",
    "norm2.": "norm3.",
    "ffn.net.0.proj.": "ffn.0.", "ffn.net.2.": "ffn.2.",
}


def original_name(name):
    m = re.fullmatch(r"blocks\.(\d+)\.(.+)", name)
    table, rest, prefix = (BLOCK_TO_ORIGINAL, m[2], f"blocks.{m[1]}.") if m else (TOP_TO_ORIGINAL, name, "")
    for diffusers, original in table.items():
        if rest == diffusers or (diffusers.endswith(".") and rest.startswith(diffusers)):
            return prefix + original + rest[len(diffusers):]
    raise KeyError(f"transformer key {name} has no original name")


def to_original_names(state_dict):
    """A diffusers WanTransformer3DModel state dict under [W]'s names (same tensors)."""
    return {original_name(k): v for k, v in state_dict.items()}
