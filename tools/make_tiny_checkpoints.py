#!/usr/bin/env python3
"""Make tests/models/sd-checkpoints: tiny Stable Diffusion 1.x and 2.x models
with random weights, saved in every file layout users hold (single-file LDM
checkpoints, diffusers folders with and without the fp16 variant, sharded,
optimum's ONNX folder), plus PyTorch's outputs for them: the oracle for
kiln's native checkpoint loaders.

    /usr/bin/python3 tools/make_tiny_checkpoints.py [--out tests/models/sd-checkpoints]
    /usr/bin/python3 tools/make_tiny_checkpoints.py --full sd15 --out sd15.safetensors [--dtype f16] [--onnx DIR]
    /usr/bin/python3 tools/make_tiny_checkpoints.py --full sd21 --list

Written under --out (see its README.md for the file list):

    sd1-tokenizer/, sd2-tokenizer/  CLIP BPE tokenizer files (SD1 pads with EOS, SD2 with "!", id 0)
    tokenizer/                      vocab.json and merges.txt alone, beside the single files
    sd1.safetensors (F32)           single-file LDM checkpoints, with the keys real files carry and
    sd2.safetensors (F16)           loaders must ignore (schedule buffers, position_ids, logit_scale,
                                    model_ema.*)
    sd1-diffusers/                  diffusers folder, .fp16.safetensors variant files only
    sd1-diffusers-sharded/          F32 (unet and text_encoder in 2 shards + index.json, vae whole)
                                    and the same .fp16 files as sd1-diffusers/ side by side
    sd2-diffusers/                  .fp16 only, unet in 2 shards under the variant's names; text
                                    encoder converted from OpenCLIP as diffusers does
    sd1-onnx/                       the sd1 weights in optimum's ONNX layout (as tests/models/tiny-sd)
    reference/{sd1,sd2}/<model>/{inputs,outputs}/*.npy   float64 outputs rounded to float32
    reference/{sd1,sd2}/cases/<case>/                    whole-pipeline cases in tiny-sd's format

Files that hold the same bytes (the fp16 variant files, configs and
tokenizers repeated across folders) are written identical, so git stores
them once; README.md gives the total of distinct contents.

The networks are written here, named exactly as diffusers (UNet2DConditionModel,
AutoencoderKL), transformers (CLIPTextModel) and open_clip (text transformer)
name them; the LDM names come from the diffusers -> LDM renaming functions
below (the tables of the reference doc, sections A.2-A.5), written
independently of kiln's C++ LDM -> diffusers mapping so each checks the other.

Weights: torch's default distributions (uniform +-1/sqrt(fan_in) for
Linear/Conv), changed as make_reference_models.adjust_init does (norm affine
1 +- 0.1 / +- 0.1, q and k doubled), drawn per tensor from a seed made of its
name (so the full-size mode can draw any tensor alone), then rounded to
float16: F32 and F16 files hold exactly the same numbers.

--full writes a full-size random-weight single file (SD 1.5 or SD 2.1
architecture, same layout and extra keys) one tensor at a time, for memory
and speed tests: it never holds the whole model (peak well under 1 GB).
--onnx DIR exports the same numbers' text encoder, UNet and VAE decoder to
ONNX in optimum's layout with external data, for ONNX Runtime comparisons
(one network in memory at a time, about twice its float32 size at the
export's peak: ~7 GB for the UNet). --list prints the names and shapes only.

Deterministic: running it twice writes identical files. Needs torch (1.13),
onnx and numpy; nothing else.
"""
import argparse
import collections
import contextlib
import copy
import gc
import hashlib
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile
import zlib

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clip_bpe  # noqa: E402
import scheduler_ref  # noqa: E402
from make_reference_models import KILN_OPS, timestep_embedding  # noqa: E402
from make_tiny_sd import export, generate, init_picture, write_json, write_png, write_reference_case  # noqa: E402

MAX_LENGTH = 77
CLIP_BOS_ID, CLIP_EOS_ID = 49406, 49407  # the real CLIP vocabulary's, for --full configs
LATENT_CHANNELS = 4
SCALING_FACTOR = 0.18215
DIFFUSERS_VERSION = "0.21.0"

# SD 1.5's scheduler_config.json (runwayml/stable-diffusion-v1-5), prediction_type spelled out.
SD15_SCHEDULER = dict(scheduler_ref.SD15, _diffusers_version="0.6.0", prediction_type="epsilon")
# SD 2.1's (stabilityai/stable-diffusion-2-1): DDIM, v-prediction.
SD21_SCHEDULER = dict(scheduler_ref.SD15, _class_name="DDIMScheduler", _diffusers_version="0.8.0",
                      prediction_type="v_prediction")


def unet_config(channels, layers_per_block, heads, context_dim, linear, upcast, sample_size, cross_attn_levels):
    """diffusers' unet/config.json for an SD-style UNet: CrossAttn blocks at
    the first `cross_attn_levels` levels going down (and the mirror ones
    going up), plain blocks below, as SD 1.x/2.x."""
    n = len(channels)
    down = ["CrossAttnDownBlock2D" if i < cross_attn_levels else "DownBlock2D" for i in range(n)]
    up = ["CrossAttnUpBlock2D" if n - 1 - i < cross_attn_levels else "UpBlock2D" for i in range(n)]
    return {
        "_class_name": "UNet2DConditionModel", "_diffusers_version": DIFFUSERS_VERSION,
        "act_fn": "silu", "attention_head_dim": heads, "block_out_channels": channels,
        "center_input_sample": False, "cross_attention_dim": context_dim, "down_block_types": down,
        "downsample_padding": 1, "dual_cross_attention": False, "flip_sin_to_cos": True, "freq_shift": 0,
        "in_channels": LATENT_CHANNELS, "layers_per_block": layers_per_block, "mid_block_scale_factor": 1,
        "mid_block_type": "UNetMidBlock2DCrossAttn", "norm_eps": 1e-05, "norm_num_groups": 32,
        "only_cross_attention": False, "out_channels": LATENT_CHANNELS, "sample_size": sample_size,
        "transformer_layers_per_block": 1, "up_block_types": up, "upcast_attention": upcast,
        "use_linear_projection": linear,
    }


def vae_config(channels, layers_per_block, sample_size):
    n = len(channels)
    return {
        "_class_name": "AutoencoderKL", "_diffusers_version": DIFFUSERS_VERSION, "act_fn": "silu",
        "block_out_channels": channels, "down_block_types": ["DownEncoderBlock2D"] * n, "force_upcast": True,
        "in_channels": 3, "latent_channels": LATENT_CHANNELS, "layers_per_block": layers_per_block,
        "norm_num_groups": 32, "out_channels": 3, "sample_size": sample_size, "scaling_factor": SCALING_FACTOR,
        "up_block_types": ["UpDecoderBlock2D"] * n,
    }


def text_config(arch, width, heads, layers, mlp, act, vocab_size, projection_dim=None):
    """The text encoder's shape. arch "clip": HF CLIPTextModel as stored (SD1);
    "openclip": open_clip's text transformer (SD2), whose context is the
    penultimate layer with ln_final, as SD 2.x's FrozenOpenCLIPEmbedder."""
    return {"arch": arch, "hidden_size": width, "num_attention_heads": heads, "num_hidden_layers": layers,
            "intermediate_size": mlp, "hidden_act": act, "vocab_size": vocab_size,
            "max_position_embeddings": MAX_LENGTH, "projection_dim": projection_dim or width}


# The tiny networks' shared parts. The text encoders are 64 wide with one head:
# CLIP's head size is 64, the only rule a loader has for the head count of a
# single file without config. The VAE has 2 levels (factor 2) with a channel
# change, so that the encoder (32 -> 64) and the decoder (64 -> 32) each hold a
# nin_shortcut; measured against [32, 32, 64] (factor 4) it has 658k parameters
# against 733k, and its reference images are half as wide.
TINY_LATENT = 16  # the UNets' sample_size: latent side of the references and cases
TINY_VAE = vae_config([32, 64], 1, 2 * TINY_LATENT)
SHARDS = 2  # shards of a sharded component

# The weight files a diffusers folder holds for each component: in `dtype`,
# named with `variant` (None: plain names), the `sharded` components cut in
# SHARDS files with an index.
WeightFiles = collections.namedtuple("WeightFiles", "dtype variant sharded")
FP16_FILES = WeightFiles("F16", "fp16", ())

# The tiny families. vocab_size None: the tokenizer's. unet_out_scale makes the
# random UNet's prediction about unit scale, as a trained one's (measured).
# Sized for git: one single file a family (sd1 F32, sd2 F16), and the fp16
# variant files of sd1's two folders written byte-identical, so git stores
# them once.
FAMILIES = {
    "sd1": {
        "text": text_config("clip", 64, 1, 2, 128, "quick_gelu", None),
        "unet": unet_config([32, 32], 2, 8, 64, False, False, TINY_LATENT, 1),
        "vae": TINY_VAE,
        "scheduler": SD15_SCHEDULER, "pad_token": clip_bpe.EOS, "unet_out_scale": 3.0,
        "single_files": {"sd1.safetensors": "F32"},
        # sd1-diffusers: the variant alone, which a loader must find without being told.
        # sd1-diffusers-sharded: F32 (the numbers of sd1.safetensors) with the same
        # variant files beside it, which --variant fp16 must pick.
        "diffusers_folders": {"sd1-diffusers": [FP16_FILES],
                              "sd1-diffusers-sharded": [WeightFiles("F32", None, ("unet", "text_encoder")),
                                                        FP16_FILES]},
        "onnx_folder": "sd1-onnx",
    },
    "sd2": {
        "text": text_config("openclip", 64, 1, 3, 128, "gelu", None),
        "unet": unet_config([64, 64], 1, [1, 1], 64, True, True, TINY_LATENT, 1),  # heads C/64, as SD 2.x
        "vae": TINY_VAE,
        "scheduler": SD21_SCHEDULER, "pad_token": "!", "unet_out_scale": 3.0,
        "single_files": {"sd2.safetensors": "F16"},
        # The UNet sharded under a variant's names, index included (see write_sharded),
        # which a loader cannot find by adding .fp16 to the plain ones.
        "diffusers_folders": {"sd2-diffusers": [WeightFiles("F16", "fp16", ("unet",))]},
        "onnx_folder": None,
    },
}


def full_family(name, scale=1):
    """SD 1.5 or SD 2.1's real architecture; `scale` > 1 divides the widths
    (kept multiples of what GroupNorm and the heads need) for a quick check
    of this mode without the full-size allocation."""
    def w(c, multiple):
        return max(multiple, int(round(c / scale / multiple)) * multiple)
    vocab = 49408 if scale == 1 else w(49408, 8)
    if name == "sdxl":
        text = text_config("clip", w(768, 12 * 8), 12, 12, w(3072, 8), "quick_gelu", vocab)
        text_2 = text_config("openclip", w(1280, 20 * 8), 20, 32, w(5120, 8), "gelu", vocab,
                             projection_dim=w(1280, 8))
        unet_ch = [w(c, 64) for c in (320, 640, 1280)]
        unet = sdxl_unet_config(unet_ch, 2, [0, 2, 10], text["hidden_size"] + text_2["hidden_size"],
                                text_2["projection_dim"], 128)
        vae = dict(vae_config([w(c, 32) for c in (128, 256, 512, 512)], 2, 1024), scaling_factor=SDXL_SCALING_FACTOR)
        return {"text": text, "text_2": text_2, "unet": unet, "vae": vae, "scheduler": SDXL_SCHEDULER,
                "pad_token": "!", "unet_out_scale": 1.0}
    if name == "sd15":
        unet_ch = [w(c, 32) for c in (320, 640, 1280, 1280)]
        text = text_config("clip", w(768, 12 * 8), 12, 12, w(3072, 8), "quick_gelu", vocab)
        unet = unet_config(unet_ch, 2, 8, text["hidden_size"], False, False, 64, 3)
        scheduler, pad = SD15_SCHEDULER, clip_bpe.EOS
    else:
        unet_ch = [w(c, 64) for c in (320, 640, 1280, 1280)]
        text = text_config("openclip", w(1024, 16 * 8), 16, 24, w(4096, 8), "gelu", vocab)
        unet = unet_config(unet_ch, 2, [c // 64 for c in unet_ch], text["hidden_size"], True, True, 96, 3)
        scheduler, pad = SD21_SCHEDULER, "!"
    vae = vae_config([w(c, 32) for c in (128, 256, 512, 512)], 2, 768 if name == "sd21" else 512)
    return {"text": text, "unet": unet, "vae": vae, "scheduler": scheduler, "pad_token": pad, "unet_out_scale": 1.0}


# ------------------------------------------------------------------ modules
# Named as diffusers / transformers / open_clip name them, so that
# state_dict() gives the real checkpoint names. Head sizes are Python ints so
# the ONNX export needs no shape arithmetic for them.

def attend(q, k, v, heads, head_dim, mask=None):
    """Multi-head scaled dot-product attention over [B, N, heads*head_dim]."""
    b, n, _ = q.shape
    m = k.shape[1]
    q = q.reshape(b, n, heads, head_dim).transpose(1, 2)
    k = k.reshape(b, m, heads, head_dim).transpose(1, 2)
    v = v.reshape(b, m, heads, head_dim).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-1, -2)) * head_dim ** -0.5
    if mask is not None:
        scores = scores + mask
    h = torch.matmul(scores.softmax(dim=-1), v)
    return h.transpose(1, 2).reshape(b, n, heads * head_dim)


def causal_mask(n, dtype):
    # As HF CLIP builds it: the most negative float above the diagonal.
    return torch.full((n, n), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]


class Attention(nn.Module):
    """diffusers' Attention in the UNet's transformer blocks: to_q/k/v
    without bias, to_out.0."""

    def __init__(self, dim, heads, context_dim=None):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_v = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim), nn.Dropout(0.0)])

    def forward(self, x, context=None):
        context = x if context is None else context
        h = attend(self.to_q(x), self.to_k(context), self.to_v(context), self.heads, self.head_dim)
        return self.to_out[0](h)


class GEGLU(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.proj = nn.Linear(dim, 2 * inner)

    def forward(self, x):
        value, gate = self.proj(x).chunk(2, dim=-1)  # first half value, second half gate
        return value * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.ModuleList([GEGLU(dim, 4 * dim), nn.Dropout(0.0), nn.Linear(4 * dim, dim)])

    def forward(self, x):
        return self.net[2](self.net[0](x))


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, heads, context_dim):
        super().__init__()
        self.norm1, self.attn1 = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2, self.attn2 = nn.LayerNorm(dim), Attention(dim, heads, context_dim)
        self.norm3, self.ff = nn.LayerNorm(dim), FeedForward(dim)

    def forward(self, x, context):
        x = x + self.attn1(self.norm1(x))
        x = x + self.attn2(self.norm2(x), context)
        return x + self.ff(self.norm3(x))


class Transformer2DModel(nn.Module):
    """SpatialTransformer: proj_in/out are 1x1 convs applied on NCHW (SD1) or
    Linear applied to the tokens (SD2, use_linear_projection)."""

    def __init__(self, channels, heads, context_dim, linear, depth=1):
        super().__init__()
        self.channels, self.linear = channels, linear
        self.norm = nn.GroupNorm(32, channels, eps=1e-6)
        proj = (lambda: nn.Linear(channels, channels)) if linear else (lambda: nn.Conv2d(channels, channels, 1))
        self.proj_in = proj()
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(channels, heads, context_dim)
                                                 for _ in range(depth)])
        self.proj_out = proj()

    def forward(self, x, context):
        b, _, h, w = x.shape
        c = self.channels
        y = self.norm(x)
        if self.linear:
            y = self.proj_in(y.permute(0, 2, 3, 1).reshape(b, h * w, c))
        else:
            y = self.proj_in(y).permute(0, 2, 3, 1).reshape(b, h * w, c)
        for block in self.transformer_blocks:
            y = block(y, context)
        if self.linear:
            y = self.proj_out(y).reshape(b, h, w, c).permute(0, 3, 1, 2)
        else:
            y = self.proj_out(y.reshape(b, h, w, c).permute(0, 3, 1, 2))
        return x + y


class ResnetBlock2D(nn.Module):
    """GroupNorm(32), SiLU, conv3x3 twice; time embedding (silu, Linear)
    added after conv1; 1x1 conv_shortcut when the channel count changes."""

    def __init__(self, cin, cout, temb_channels=None, eps=1e-5):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(32, cin, eps=eps), nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb_channels, cout) if temb_channels else None
        self.norm2, self.conv2 = nn.GroupNorm(32, cout, eps=eps), nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, temb=None):
        h = self.conv1(F.silu(self.norm1(x)))
        if self.time_emb_proj is not None:
            h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h


class Downsample2D(nn.Module):
    """conv3x3 stride 2: padding 1 in the UNet; in the VAE encoder padding 0
    after an asymmetric (0, 1, 0, 1) pad, as LDM's Downsample."""

    def __init__(self, channels, padding):
        super().__init__()
        self.padding = padding
        self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=padding)

    def forward(self, x):
        if self.padding == 0:
            x = F.pad(x, (0, 1, 0, 1))
        return self.conv(x)


class Upsample2D(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class TimestepEmbedding(nn.Module):
    """diffusers' TimestepEmbedding; with cond_proj_dim (an LCM UNet's
    time_cond_proj_dim) the condition is projected and added first."""

    def __init__(self, cin, cout, cond_proj_dim=None):
        super().__init__()
        self.linear_1, self.linear_2 = nn.Linear(cin, cout), nn.Linear(cout, cout)
        self.cond_proj = nn.Linear(cond_proj_dim, cin, bias=False) if cond_proj_dim else None

    def forward(self, x, condition=None):
        if condition is not None:
            x = x + self.cond_proj(condition)
        return self.linear_2(F.silu(self.linear_1(x)))


class DownBlock2D(nn.Module):
    """DownBlock2D, or CrossAttnDownBlock2D when `heads` is given. Returns
    the output and the skips it adds: each resnet(+attention) output and
    the downsampler's."""

    def __init__(self, cin, cout, layers, temb, heads, context_dim, linear, add_downsample, depth=1):
        super().__init__()
        # diffusers registers attentions before resnets: the state dict's (and shards') order.
        self.attentions = (nn.ModuleList([Transformer2DModel(cout, heads, context_dim, linear, depth)
                                          for _ in range(layers)]) if heads else None)
        self.resnets = nn.ModuleList([ResnetBlock2D(cin if j == 0 else cout, cout, temb) for j in range(layers)])
        self.downsamplers = nn.ModuleList([Downsample2D(cout, padding=1)]) if add_downsample else None

    def forward(self, h, temb, context):
        skips = []
        for j, resnet in enumerate(self.resnets):
            h = resnet(h, temb)
            if self.attentions is not None:
                h = self.attentions[j](h, context)
            skips.append(h)
        if self.downsamplers is not None:
            h = self.downsamplers[0](h)
            skips.append(h)
        return h, skips


class UpBlock2D(nn.Module):
    """UpBlock2D, or CrossAttnUpBlock2D when `heads` is given: each resnet
    takes the previous output concatenated with the last skip."""

    def __init__(self, in_channels, cout, temb, heads, context_dim, linear, add_upsample, depth=1):
        super().__init__()
        layers = len(in_channels)
        self.attentions = (nn.ModuleList([Transformer2DModel(cout, heads, context_dim, linear, depth)
                                          for _ in range(layers)]) if heads else None)
        self.resnets = nn.ModuleList([ResnetBlock2D(cin, cout, temb) for cin in in_channels])
        self.upsamplers = nn.ModuleList([Upsample2D(cout)]) if add_upsample else None

    def forward(self, h, skips, temb, context):
        for j, resnet in enumerate(self.resnets):
            h = resnet(torch.cat([h, skips.pop()], dim=1), temb)
            if self.attentions is not None:
                h = self.attentions[j](h, context)
        if self.upsamplers is not None:
            h = self.upsamplers[0](h)
        return h


class UNetMidBlock2DCrossAttn(nn.Module):
    def __init__(self, channels, temb, heads, context_dim, linear, depth=1):
        super().__init__()
        self.attentions = nn.ModuleList([Transformer2DModel(channels, heads, context_dim, linear, depth)])
        self.resnets = nn.ModuleList([ResnetBlock2D(channels, channels, temb) for _ in range(2)])

    def forward(self, h, temb, context):
        return self.resnets[1](self.attentions[0](self.resnets[0](h, temb), context), temb)


class UNet2DConditionModel(nn.Module):
    """diffusers' UNet2DConditionModel for SD 1.x/2.x and XL configs.
    attention_head_dim holds the head count (one for all levels, or one a
    level), as diffusers reads it; transformer_layers_per_block the depth
    (likewise). SDXL's addition_embed_type "text_time": add_embedding over
    the pooled text and the six time ids' sinusoidal embeddings, added to
    the time embedding."""

    def __init__(self, config):
        super().__init__()
        chans, lpb = config["block_out_channels"], config["layers_per_block"]
        heads = config["attention_head_dim"]
        heads = list(heads) if isinstance(heads, list) else [heads] * len(chans)
        depths = config.get("transformer_layers_per_block", 1)
        depths = list(depths) if isinstance(depths, list) else [depths] * len(chans)
        ctx, linear = config["cross_attention_dim"], config["use_linear_projection"]
        c0 = chans[0]
        temb = 4 * c0
        self.c0 = c0
        self.conv_in = nn.Conv2d(config["in_channels"], c0, 3, padding=1)
        self.time_embedding = TimestepEmbedding(c0, temb, config.get("time_cond_proj_dim"))
        self.add_time_dim = None
        if config.get("addition_embed_type") == "text_time":
            self.add_time_dim = config["addition_time_embed_dim"]
            self.add_embedding = TimestepEmbedding(config["projection_class_embeddings_input_dim"], temb)
        # diffusers registers both lists before mid_block (state dict order).
        self.down_blocks, self.up_blocks = nn.ModuleList(), nn.ModuleList()
        skips, c = [c0], c0  # channels of the skips the down path leaves
        for i, kind in enumerate(config["down_block_types"]):
            last = i == len(chans) - 1
            level_heads = heads[i] if kind.startswith("CrossAttn") else None
            self.down_blocks.append(DownBlock2D(c, chans[i], lpb, temb, level_heads, ctx, linear,
                                                add_downsample=not last, depth=depths[i]))
            c = chans[i]
            skips += [c] * lpb + ([] if last else [c])
        self.mid_block = UNetMidBlock2DCrossAttn(c, temb, heads[-1], ctx, linear, depths[-1])
        for i, kind in enumerate(config["up_block_types"]):
            level = len(chans) - 1 - i
            cout, in_channels = chans[level], []
            for _ in range(lpb + 1):
                in_channels.append(c + skips.pop())
                c = cout
            self.up_blocks.append(UpBlock2D(in_channels, cout, temb,
                                            heads[level] if kind.startswith("CrossAttn") else None,
                                            ctx, linear, add_upsample=level > 0, depth=depths[level]))
        assert not skips
        self.conv_norm_out = nn.GroupNorm(32, c0, eps=config["norm_eps"])
        self.conv_out = nn.Conv2d(c0, config["out_channels"], 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states, text_embeds=None, time_ids=None, timestep_cond=None):
        ctx = encoder_hidden_states
        temb = self.time_embedding(timestep_embedding(timestep, self.c0), timestep_cond)
        if self.add_time_dim:
            ids = timestep_embedding(time_ids.flatten(), self.add_time_dim).reshape(time_ids.shape[0], -1)
            temb = temb + self.add_embedding(torch.cat([text_embeds, ids], dim=-1))
        h = self.conv_in(sample)
        skips = [h]
        for block in self.down_blocks:
            h, s = block(h, temb, ctx)
            skips += s
        h = self.mid_block(h, temb, ctx)
        for block in self.up_blocks:
            h = block(h, skips, temb, ctx)
        return self.conv_out(F.silu(self.conv_norm_out(h)))


class VaeAttention(nn.Module):
    """The VAE mid block's attention: one head over the H*W positions, Linear
    q/k/v/out with bias, scale C^-0.5, residual added."""

    def __init__(self, channels):
        super().__init__()
        self.channels = channels
        self.group_norm = nn.GroupNorm(32, channels, eps=1e-6)
        self.to_q, self.to_k, self.to_v = (nn.Linear(channels, channels) for _ in range(3))
        self.to_out = nn.ModuleList([nn.Linear(channels, channels), nn.Dropout(0.0)])

    def forward(self, x):
        b, c, h, w = x.shape
        y = self.group_norm(x).reshape(b, self.channels, h * w).transpose(1, 2)
        y = self.to_out[0](attend(self.to_q(y), self.to_k(y), self.to_v(y), 1, self.channels))
        return x + y.transpose(1, 2).reshape(b, self.channels, h, w)


class UNetMidBlock2D(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.attentions = nn.ModuleList([VaeAttention(channels)])
        self.resnets = nn.ModuleList([ResnetBlock2D(channels, channels, eps=1e-6) for _ in range(2)])

    def forward(self, h):
        return self.resnets[1](self.attentions[0](self.resnets[0](h)))


class VaeBlock(nn.Module):
    """DownEncoderBlock2D (`resample` "down") or UpDecoderBlock2D ("up"):
    resnets without time embedding, then the optional resampler."""

    def __init__(self, cin, cout, layers, resample):
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock2D(cin if j == 0 else cout, cout, eps=1e-6) for j in range(layers)])
        if resample == "down":
            self.downsamplers = nn.ModuleList([Downsample2D(cout, padding=0)])
        elif resample == "up":
            self.upsamplers = nn.ModuleList([Upsample2D(cout)])
        self.resample = resample

    def forward(self, h):
        for resnet in self.resnets:
            h = resnet(h)
        if self.resample == "down":
            h = self.downsamplers[0](h)
        elif self.resample == "up":
            h = self.upsamplers[0](h)
        return h


class Encoder(nn.Module):
    def __init__(self, chans, lpb, latent_channels):
        super().__init__()
        self.conv_in = nn.Conv2d(3, chans[0], 3, padding=1)
        self.down_blocks = nn.ModuleList()
        c = chans[0]
        for i, cout in enumerate(chans):
            self.down_blocks.append(VaeBlock(c, cout, lpb, "down" if i < len(chans) - 1 else None))
            c = cout
        self.mid_block = UNetMidBlock2D(c)
        self.conv_norm_out = nn.GroupNorm(32, c, eps=1e-6)
        self.conv_out = nn.Conv2d(c, 2 * latent_channels, 3, padding=1)  # mean and log-variance

    def forward(self, x):
        h = self.conv_in(x)
        for block in self.down_blocks:
            h = block(h)
        return self.conv_out(F.silu(self.conv_norm_out(self.mid_block(h))))


class Decoder(nn.Module):
    def __init__(self, chans, lpb, latent_channels):
        super().__init__()
        rev = chans[::-1]
        self.conv_in = nn.Conv2d(latent_channels, rev[0], 3, padding=1)
        self.up_blocks = nn.ModuleList()  # registered before mid_block, as diffusers
        self.mid_block = UNetMidBlock2D(rev[0])
        c = rev[0]
        for i, cout in enumerate(rev):
            self.up_blocks.append(VaeBlock(c, cout, lpb + 1, "up" if i < len(rev) - 1 else None))
            c = cout
        self.conv_norm_out = nn.GroupNorm(32, c, eps=1e-6)
        self.conv_out = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, z):
        h = self.mid_block(self.conv_in(z))
        for block in self.up_blocks:
            h = block(h)
        return self.conv_out(F.silu(self.conv_norm_out(h)))


class AutoencoderKL(nn.Module):
    def __init__(self, config):
        super().__init__()
        chans, lpb, latent = config["block_out_channels"], config["layers_per_block"], config["latent_channels"]
        self.encoder, self.decoder = Encoder(chans, lpb, latent), Decoder(chans, lpb, latent)
        self.quant_conv = nn.Conv2d(2 * latent, 2 * latent, 1)
        self.post_quant_conv = nn.Conv2d(latent, latent, 1)

    def encode(self, x):
        """Image [B, 3, H, W] in [-1, 1] -> [B, 2*latent, h, w]: mean, log-variance."""
        return self.quant_conv(self.encoder(x))

    def decode(self, z):
        return self.decoder(self.post_quant_conv(z))


class VaeEncode(nn.Module):
    """optimum's vae_encoder graph: sample -> latent_parameters."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, sample):
        return self.vae.encode(sample)


class VaeDecode(nn.Module):
    """optimum's vae_decoder graph: latent_sample -> sample."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, latent_sample):
        return self.vae.decode(latent_sample)


def activation(name):
    if name == "quick_gelu":
        return lambda x: x * torch.sigmoid(1.702 * x)
    assert name == "gelu", name
    return F.gelu  # exact, through Erf


def namespace(**modules):
    """An empty module holding `modules`: a level of the checkpoint's names
    that has no code of its own (text_model, embeddings, encoder)."""
    m = nn.Module()
    for k, v in modules.items():
        setattr(m, k, v)
    return m


class CLIPAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.k_proj, self.v_proj, self.q_proj, self.out_proj = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, mask):
        return self.out_proj(attend(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.heads, self.head_dim, mask))


class CLIPEncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.self_attn = CLIPAttention(d, cfg["num_attention_heads"])
        self.layer_norm1 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = namespace(fc1=nn.Linear(d, cfg["intermediate_size"]), fc2=nn.Linear(cfg["intermediate_size"], d))
        self.layer_norm2 = nn.LayerNorm(d, eps=1e-5)
        self.act = activation(cfg["hidden_act"])

    def forward(self, x, mask):
        x = x + self.self_attn(self.layer_norm1(x), mask)
        return x + self.mlp.fc2(self.act(self.mlp.fc1(self.layer_norm2(x))))


class CLIPTextModel(nn.Module):
    """transformers' CLIPTextModel: token + position embedding, pre-LN causal
    layers, final_layer_norm. Returns (last_hidden_state, pooler_output), the
    pooled vector at argmax(input_ids) (EOS has the largest id)."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.text_model = namespace(
            embeddings=namespace(token_embedding=nn.Embedding(cfg["vocab_size"], d),
                                 position_embedding=nn.Embedding(cfg["max_position_embeddings"], d)),
            encoder=namespace(layers=nn.ModuleList([CLIPEncoderLayer(cfg) for _ in range(cfg["num_hidden_layers"])])),
            final_layer_norm=nn.LayerNorm(d, eps=1e-5))

    def layer_outputs(self, input_ids):
        """transformers' hidden_states: the embeddings, then each layer's output."""
        tm = self.text_model
        n = input_ids.shape[1]
        x = tm.embeddings.token_embedding(input_ids) + tm.embeddings.position_embedding.weight[:n]
        mask = causal_mask(n, x.dtype)
        outs = [x]
        for layer in tm.encoder.layers:
            outs.append(layer(outs[-1], mask))
        return outs

    def forward(self, input_ids):
        b = input_ids.shape[0]
        x = self.text_model.final_layer_norm(self.layer_outputs(input_ids)[-1])
        return x, x[torch.arange(b), input_ids.argmax(dim=-1)]


class OpenClipAttention(nn.Module):
    """torch's MultiheadAttention as open_clip stores it: packed in_proj
    (rows Q, then K, then V) and out_proj."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim))
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x, mask):
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        return self.out_proj(attend(q, k, v, self.heads, self.head_dim, mask))


class ResidualAttentionBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, inner = cfg["hidden_size"], cfg["intermediate_size"]
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = OpenClipAttention(d, cfg["num_attention_heads"])
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = namespace(c_fc=nn.Linear(d, inner), c_proj=nn.Linear(inner, d))

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class OpenClipTextModel(nn.Module):
    """open_clip's text tower as SD 2.x's FrozenOpenCLIPEmbedder uses it
    (layer "penultimate"): the last resblock is skipped and ln_final applied
    to the one before. text_projection and logit_scale are stored, not used."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.token_embedding = nn.Embedding(cfg["vocab_size"], d)
        self.positional_embedding = nn.Parameter(torch.empty(cfg["max_position_embeddings"], d))
        self.transformer = namespace(resblocks=nn.ModuleList([ResidualAttentionBlock(cfg)
                                                              for _ in range(cfg["num_hidden_layers"])]))
        self.ln_final = nn.LayerNorm(d, eps=1e-5)
        self.text_projection = nn.Parameter(torch.empty(d, cfg["projection_dim"]))  # [in, out], used as x @ P
        self.logit_scale = nn.Parameter(torch.empty(()))

    def layer_outputs(self, input_ids):
        """The embeddings, then each resblock's output."""
        n = input_ids.shape[1]
        x = self.token_embedding(input_ids) + self.positional_embedding[:n]
        mask = causal_mask(n, x.dtype)
        outs = [x]
        for block in self.transformer.resblocks:
            outs.append(block(outs[-1], mask))
        return outs

    def forward(self, input_ids):
        return (self.ln_final(self.layer_outputs(input_ids)[-2]),)


def make_text_encoder(cfg):
    return CLIPTextModel(cfg) if cfg["arch"] == "clip" else OpenClipTextModel(cfg)


class MetaDevice(TorchFunctionMode):
    """Inside it, modules are built on the meta device: shapes without memory
    (torch 1.13 has no torch.device context manager)."""
    FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.rand, torch.randn, torch.full, torch.tensor}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in self.FACTORIES and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


# ---------------------------------------------------------------- weights
# One rule a tensor, from its module's type; values drawn from a generator
# seeded by the tensor's name, so that any tensor can be made alone.

Init = collections.namedtuple("Init", "kind a b qk_rows scale")  # uniform(+-a) | normal(a, b) | const(a)
QK_LINEARS = {"to_q", "to_k", "q_proj", "k_proj"}


def init_rule(module, module_name, param_name, shape):
    last = module_name.rsplit(".", 1)[-1]
    if isinstance(module, (nn.GroupNorm, nn.LayerNorm)):
        # Not torch's 1 and 0: a runtime that swaps or drops them must show.
        return Init("normal", 1.0 if param_name == "weight" else 0.0, 0.1, 0, 1.0)
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        bound = math.prod(module.weight.shape[1:]) ** -0.5  # torch's default for weight and bias
        # Doubled q and k: attention scores of std ~1, not nearly uniform attention.
        qk = shape[0] if param_name == "weight" and last in QK_LINEARS else 0
        return Init("uniform", bound, 0.0, qk, 1.0)
    if isinstance(module, nn.Embedding):
        return Init("normal", 0.0, 0.02 if last == "token_embedding" else 0.01, 0, 1.0)  # CLIP's init
    if isinstance(module, OpenClipAttention):
        dim = shape[-1] if param_name == "in_proj_weight" else shape[0] // 3
        return Init("uniform", dim ** -0.5, 0.0, 2 * dim if param_name == "in_proj_weight" else 0, 1.0)
    if isinstance(module, OpenClipTextModel):
        if param_name == "positional_embedding":
            return Init("normal", 0.0, 0.01, 0, 1.0)
        if param_name == "text_projection":
            return Init("normal", 0.0, shape[0] ** -0.5, 0, 1.0)
        return Init("const", math.log(1 / 0.07), 0.0, 0, 1.0)  # logit_scale, CLIP's init
    raise TypeError(f"no init rule for {module_name}.{param_name} ({type(module).__name__})")


def init_rules(model, scales=None):
    """name -> (shape, Init) for every parameter of `model`, in state dict
    order. scales: name prefix -> factor applied on top."""
    rules = {}
    for module_name, m in model.named_modules():
        for param_name, p in m.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            rule = init_rule(m, module_name, param_name, tuple(p.shape))
            for prefix, factor in (scales or {}).items():
                if name.startswith(prefix):
                    rule = rule._replace(scale=rule.scale * factor)
            rules[name] = (tuple(p.shape), rule)
    return rules


def init_value(key, shape, rule):
    """The tensor for `rule`, float32 holding float16-representable values."""
    gen = torch.Generator().manual_seed(zlib.crc32(key.encode()))
    # In place: --full makes tensors of up to 200 MB one after another.
    if rule.kind == "uniform":
        v = torch.rand(shape, generator=gen).mul_(2).sub_(1).mul_(rule.a)
    elif rule.kind == "normal":
        v = torch.randn(shape, generator=gen).mul_(rule.b).add_(rule.a)
    else:
        v = torch.full(shape, rule.a)
    if rule.qk_rows:
        v[:rule.qk_rows] *= 2
    return v.mul_(rule.scale).half().float()


def fill_params(model, seed_prefix, rules):
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape, rule = rules[name]
            p.copy_(init_value(f"{seed_prefix}/{name}", shape, rule))


def lazy_source(seed_prefix, rules):
    """name -> (shape, produce) drawing each tensor only when asked (--full)."""
    return {name: (shape, lambda name=name, shape=shape, rule=rule:
                   init_value(f"{seed_prefix}/{name}", shape, rule).numpy())
            for name, (shape, rule) in rules.items()}


def module_source(model):
    """name -> (shape, produce) over a built model's state dict."""
    return {name: (tuple(t.shape), lambda t=t: t.detach().float().numpy())
            for name, t in model.state_dict().items()}


# ------------------------------------------------- diffusers -> LDM names
# The reference doc's tables (sections A.2, A.4, A.5), one direction only:
# kiln's C++ side maps the other way, and the two meet in the test data.

UNET_RESNET_TO_LDM = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1",
                      "norm2": "out_layers.0", "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}
UNET_TOP_TO_LDM = {"conv_in": "input_blocks.0.0", "time_embedding.linear_1": "time_embed.0",
                   "time_embedding.linear_2": "time_embed.2", "conv_norm_out": "out.0", "conv_out": "out.2",
                   "add_embedding.linear_1": "label_emb.0.0", "add_embedding.linear_2": "label_emb.0.2"}


def unet_resnet_to_ldm(rest):
    module, _, param = rest.partition(".")
    return f"{UNET_RESNET_TO_LDM[module]}.{param}"


def unet_key_to_ldm(name, config):
    """A diffusers UNet2DConditionModel key -> its openaimodel.UNetModel key
    (without the model.diffusion_model. prefix). Input block 0 is conv_in;
    level i's slot j is input block 1 + i*(lpb+1) + j, its downsampler the
    slot lpb (`.0.op`); up block i's slot j is output block i*(lpb+1) + j,
    its upsampler in the last slot after the resnet (.1) or, when the level
    has attention, after the attention (.2)."""
    lpb = config["layers_per_block"]
    for prefix, ldm in UNET_TOP_TO_LDM.items():
        if name.startswith(prefix + "."):
            return ldm + name[len(prefix):]
    m = re.fullmatch(r"down_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.+)", name)
    if m:
        i, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        block = 1 + i * (lpb + 1) + j
        return f"input_blocks.{block}.0.{unet_resnet_to_ldm(rest)}" if kind == "resnets" else \
            f"input_blocks.{block}.1.{rest}"
    m = re.fullmatch(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.+)", name)
    if m:
        return f"input_blocks.{1 + int(m[1]) * (lpb + 1) + lpb}.0.op.{m[2]}"
    m = re.fullmatch(r"mid_block\.(resnets|attentions)\.(\d+)\.(.+)", name)
    if m:
        if m[1] == "attentions":
            return f"middle_block.1.{m[3]}"
        return f"middle_block.{2 * int(m[2])}.{unet_resnet_to_ldm(m[3])}"
    m = re.fullmatch(r"up_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.+)", name)
    if m:
        i, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        block = i * (lpb + 1) + j
        return f"output_blocks.{block}.0.{unet_resnet_to_ldm(rest)}" if kind == "resnets" else \
            f"output_blocks.{block}.1.{rest}"
    m = re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.+)", name)
    if m:
        i = int(m[1])
        slot = 2 if config["up_block_types"][i].startswith("CrossAttn") else 1
        return f"output_blocks.{i * (lpb + 1) + lpb}.{slot}.conv.{m[2]}"
    raise KeyError(f"UNet key {name} has no LDM name")


VAE_ATTENTION_TO_LDM = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def vae_resnet_to_ldm(rest):
    return rest.replace("conv_shortcut.", "nin_shortcut.")


def vae_key_to_ldm(name, levels):
    """A diffusers AutoencoderKL key -> LDM's (without first_stage_model.).
    The decoder's up blocks are numbered from the bottom in LDM: up_blocks.i
    is up.{levels-1-i}."""
    if name.split(".")[0] in ("quant_conv", "post_quant_conv"):
        return name
    part, rest = name.split(".", 1)  # encoder | decoder
    for diff, ldm in (("conv_norm_out.", "norm_out."), ("conv_in.", "conv_in."), ("conv_out.", "conv_out.")):
        if rest.startswith(diff):
            return f"{part}.{ldm}{rest[len(diff):]}"
    m = re.fullmatch(r"down_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", rest)
    if m:
        return f"{part}.down.{m[1]}.block.{m[2]}.{vae_resnet_to_ldm(m[3])}"
    m = re.fullmatch(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.+)", rest)
    if m:
        return f"{part}.down.{m[1]}.downsample.conv.{m[2]}"
    m = re.fullmatch(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", rest)
    if m:
        return f"{part}.up.{levels - 1 - int(m[1])}.block.{m[2]}.{vae_resnet_to_ldm(m[3])}"
    m = re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.+)", rest)
    if m:
        return f"{part}.up.{levels - 1 - int(m[1])}.upsample.conv.{m[2]}"
    m = re.fullmatch(r"mid_block\.resnets\.(\d+)\.(.+)", rest)
    if m:
        return f"{part}.mid.block_{int(m[1]) + 1}.{vae_resnet_to_ldm(m[2])}"
    m = re.fullmatch(r"mid_block\.attentions\.0\.(.+)\.(weight|bias)", rest)
    if m and m[1] in VAE_ATTENTION_TO_LDM:
        return f"{part}.mid.attn_1.{VAE_ATTENTION_TO_LDM[m[1]]}.{m[2]}"
    raise KeyError(f"VAE key {name} has no LDM name")


def vae_ldm_shape(ldm_name, shape):
    """LDM's mid attention q/k/v/proj_out are 1x1 convs: [C, C] -> [C, C, 1, 1]."""
    if re.search(r"\.mid\.attn_1\.(q|k|v|proj_out)\.weight$", ldm_name) and len(shape) == 2:
        return shape + (1, 1)
    return shape


def openclip_to_hf(state, cfg, layers):
    """open_clip text weights -> transformers' CLIPTextModel ones, as
    diffusers' converter does for SD 2.x: the first `layers` resblocks (SD2
    drops the last), in_proj split into q/k/v rows, ln_final as
    final_layer_norm; text_projection and logit_scale dropped."""
    d = cfg["hidden_size"]
    out = {"text_model.embeddings.token_embedding.weight": state["token_embedding.weight"],
           "text_model.embeddings.position_embedding.weight": state["positional_embedding"]}
    for n in range(layers):
        src, dst = f"transformer.resblocks.{n}.", f"text_model.encoder.layers.{n}."
        for k, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            out[f"{dst}self_attn.{proj}.weight"] = state[src + "attn.in_proj_weight"][k * d:(k + 1) * d]
            out[f"{dst}self_attn.{proj}.bias"] = state[src + "attn.in_proj_bias"][k * d:(k + 1) * d]
        for a, b in (("attn.out_proj", "self_attn.out_proj"), ("ln_1", "layer_norm1"), ("ln_2", "layer_norm2"),
                     ("mlp.c_fc", "mlp.fc1"), ("mlp.c_proj", "mlp.fc2")):
            for p in ("weight", "bias"):
                out[f"{dst}{b}.{p}"] = state[f"{src}{a}.{p}"]
    for p in ("weight", "bias"):
        out[f"text_model.final_layer_norm.{p}"] = state[f"ln_final.{p}"]
    return out


def diffusers_text_config(cfg):
    """The CLIPTextModel config of a family's diffusers text_encoder: SD1's
    as it is; SD2's OpenCLIP converted, the unused last layer dropped."""
    if cfg["arch"] == "clip":
        return cfg
    return dict(cfg, arch="clip", num_hidden_layers=cfg["num_hidden_layers"] - 1)


def diffusers_text_encoder(text, cfg):
    """diffusers' text_encoder for a family: SD1's CLIPTextModel itself; for
    SD2 a CLIPTextModel holding the OpenCLIP weights converted."""
    if cfg["arch"] == "clip":
        return text
    hf_cfg = diffusers_text_config(cfg)
    model = CLIPTextModel(hf_cfg)
    state = openclip_to_hf(text.state_dict(), cfg, hf_cfg["num_hidden_layers"])
    model.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True)
    return model.eval()


# ------------------------------------------------------------ safetensors

ST_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4")}
Entry = collections.namedtuple("Entry", "dtype shape produce")  # produce() -> numpy array


def write_safetensors(path, entries):
    """safetensors as the reference writer lays it out: u64 header length,
    compact JSON header ({"__metadata__": {"format": "pt"}} first) padded
    with spaces to a multiple of 8, tensors in name order with no gaps.
    Tensors are produced one at a time, so a file can exceed memory."""
    names = sorted(entries)
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in names:
        e = entries[name]
        size = math.prod(e.shape) * ST_DTYPES[e.dtype].itemsize
        header[name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in names:
            e = entries[name]
            arr = np.asarray(e.produce(), dtype=ST_DTYPES[e.dtype])
            assert arr.shape == tuple(e.shape), f"{name}: {arr.shape} != {e.shape}"
            f.write(arr.tobytes(order="C"))
    return offset


def entries_of(source, dtype):
    """Entries for a (name -> (shape, produce)) source, all in `dtype`."""
    return {name: Entry(dtype, shape, produce) for name, (shape, produce) in source.items()}


def add_variant(name, variant):
    """diffusers' _add_variant (utils/hub_utils.py): the variant goes before
    the name's last dot-separated part, so model.safetensors ->
    model.fp16.safetensors and model.safetensors.index.json ->
    model.safetensors.index.fp16.json."""
    if variant is None:
        return name
    stem, ext = name.rsplit(".", 1)
    return f"{stem}.{variant}.{ext}"


def write_sharded(folder, stem, entries, shards, variant=None):
    """Sharded as transformers' and diffusers' save_pretrained do: the state
    dict's order cut into consecutive shards of about equal size, each a
    safetensors file, plus an index mapping tensors to files. Names as
    diffusers' ModelMixin.save_pretrained (models/modeling_utils.py) gives
    them: the shard suffix goes before .safetensors of the variant's weights
    name (diffusion_pytorch_model.fp16-00001-of-00002.safetensors; the
    older ...-00001-of-00002.fp16.safetensors is what diffusers warns about
    as legacy), the index is add_variant(<stem>.safetensors.index.json)."""
    names = list(entries)
    sizes = [math.prod(entries[n].shape) * ST_DTYPES[entries[n].dtype].itemsize for n in names]
    total, cuts, acc = sum(sizes), [], 0
    for i, size in enumerate(sizes):
        if acc >= total * (len(cuts) + 1) / shards and len(cuts) < shards - 1:
            cuts.append(i)
        acc += size
    bounds = [0] + cuts + [len(names)]
    weights_name = add_variant(f"{stem}.safetensors", variant)
    weight_map = {}
    for k in range(shards):
        file = weights_name.replace(".safetensors", f"-{k + 1:05d}-of-{shards:05d}.safetensors")
        part = {n: entries[n] for n in names[bounds[k]:bounds[k + 1]]}
        write_safetensors(os.path.join(folder, file), part)
        weight_map.update({n: file for n in part})
    write_json(os.path.join(folder, add_variant(f"{stem}.safetensors.index.json", variant)),
               {"metadata": {"total_size": total}, "weight_map": weight_map})


# ---------------------------------------------------- single-file (LDM)

LDM_UNET, LDM_VAE = "model.diffusion_model.", "first_stage_model."
LDM_CLIP, LDM_OPENCLIP = "cond_stage_model.transformer.", "cond_stage_model.model."
EMA_KEYS = ["time_embed.0.weight", "time_embed.0.bias", "input_blocks.0.0.weight", "input_blocks.0.0.bias",
            "out.2.weight", "out.2.bias"]  # a few, well under diffusers' 100-key EMA threshold


def ldm_schedule_buffers():
    """LatentDiffusion.register_schedule's buffers for linear_start 0.00085,
    linear_end 0.012 (SD 1.x and 2.x): computed in float64, stored float32."""
    betas = np.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=np.float64) ** 2
    alphas = 1.0 - betas
    ac = np.cumprod(alphas)
    ac_prev = np.append(1.0, ac[:-1])
    posterior_variance = betas * (1.0 - ac_prev) / (1.0 - ac)
    return {
        "betas": betas, "alphas_cumprod": ac, "alphas_cumprod_prev": ac_prev,
        "sqrt_alphas_cumprod": np.sqrt(ac), "sqrt_one_minus_alphas_cumprod": np.sqrt(1.0 - ac),
        "log_one_minus_alphas_cumprod": np.log(1.0 - ac), "sqrt_recip_alphas_cumprod": np.sqrt(1.0 / ac),
        "sqrt_recipm1_alphas_cumprod": np.sqrt(1.0 / ac - 1), "posterior_variance": posterior_variance,
        "posterior_log_variance_clipped": np.log(np.maximum(posterior_variance, 1e-20)),
        "posterior_mean_coef1": betas * np.sqrt(ac_prev) / (1.0 - ac),
        "posterior_mean_coef2": (1.0 - ac_prev) * np.sqrt(alphas) / (1.0 - ac),
    }


def ldm_ignored_entries(fam, unet):
    """What real single files carry besides the networks, which loaders must
    skip: LDM's schedule buffers, model_ema.decay / num_updates and EMA
    copies of a few UNet tensors (named "model_ema." + the key without
    "model." and without dots; values negated, exact in any dtype, so a
    loader that took them would show), and SD1's CLIP position_ids (int64)."""
    out = {name: Entry("F32", (1000,), lambda a=a: a) for name, a in ldm_schedule_buffers().items()}
    out["model_ema.decay"] = Entry("F32", (), lambda: np.array(0.9999))
    out["model_ema.num_updates"] = Entry("I32", (), lambda: np.array(0))
    for key in EMA_KEYS:
        e = unet[LDM_UNET + key]
        ema = "model_ema." + (LDM_UNET + key)[len("model."):].replace(".", "")
        out[ema] = Entry(e.dtype, e.shape, lambda e=e: -e.produce())
    if fam["text"]["arch"] == "clip":
        out[LDM_CLIP + "text_model.embeddings.position_ids"] = Entry(
            "I64", (1, MAX_LENGTH), lambda: np.arange(MAX_LENGTH)[None])
    return out


def ldm_checkpoint(fam, unet_src, vae_src, text_src, dtype):
    """The single-file checkpoint: (used, unused, ignored) entry dicts.
    unused: real weights no SD pipeline reads (SD2's last resblock,
    text_projection); ignored: see ldm_ignored_entries (and SD2's logit_scale)."""
    levels = len(fam["vae"]["block_out_channels"])
    used, unused = {}, {}
    for name, (shape, produce) in unet_src.items():
        used[LDM_UNET + unet_key_to_ldm(name, fam["unet"])] = Entry(dtype, shape, produce)
    for name, (shape, produce) in vae_src.items():
        ldm = vae_key_to_ldm(name, levels)
        ldm_shape = vae_ldm_shape(ldm, shape)
        used[LDM_VAE + ldm] = Entry(dtype, ldm_shape, lambda p=produce, s=ldm_shape: p().reshape(s))
    unet_entries = dict(used)
    ignored = ldm_ignored_entries(fam, unet_entries)
    text = fam["text"]
    last = f"transformer.resblocks.{text['num_hidden_layers'] - 1}."
    for name, (shape, produce) in text_src.items():
        if text["arch"] == "clip":
            used[LDM_CLIP + name] = Entry(dtype, shape, produce)
        elif name == "logit_scale":
            ignored[LDM_OPENCLIP + name] = Entry(dtype, shape, produce)
        elif name == "text_projection" or name.startswith(last):
            unused[LDM_OPENCLIP + name] = Entry(dtype, shape, produce)
        else:
            used[LDM_OPENCLIP + name] = Entry(dtype, shape, produce)
    return used, unused, ignored


def write_ldm_file(path, parts):
    used, unused, ignored = parts
    entries = {**used, **unused, **ignored}
    assert len(entries) == len(used) + len(unused) + len(ignored), "duplicate LDM key"
    write_safetensors(path, entries)
    return {"used": len(used), "unused": len(unused), "ignored": len(ignored)}


# ------------------------------------------------------ diffusers folders

def model_index(fam, onnx_graphs=None, tokenizer=True):
    """model_index.json of a diffusers folder or, given its graphs, of
    optimum's ONNX folder (vae_decoder / vae_encoder for vae)."""
    classes = {"text_encoder": ["transformers", "CLIPTextModel"], "unet": ["diffusers", "UNet2DConditionModel"],
               "vae": ["diffusers", "AutoencoderKL"], "vae_decoder": ["diffusers", "AutoencoderKL"],
               "vae_encoder": ["diffusers", "AutoencoderKL"]}
    out = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": DIFFUSERS_VERSION,
           "requires_safety_checker": False, "scheduler": ["diffusers", fam["scheduler"]["_class_name"]]}
    if tokenizer:
        out["tokenizer"] = ["transformers", "CLIPTokenizer"]
    if onnx_graphs is None:
        out.update(safety_checker=[None, None], feature_extractor=[None, None])
    out.update({c: classes[c] for c in onnx_graphs or ("text_encoder", "unet", "vae")})
    return out


def clip_config_json(cfg, special_ids):
    """text_encoder/config.json: transformers' CLIPTextConfig fields.
    special_ids: the tokenizer's (BOS, EOS, PAD) ids."""
    bos, eos, pad = special_ids
    return {
        "architectures": ["CLIPTextModel"], "attention_dropout": 0.0, "bos_token_id": bos,
        "dropout": 0.0, "eos_token_id": eos, "hidden_act": cfg["hidden_act"],
        "hidden_size": cfg["hidden_size"], "initializer_factor": 1.0, "initializer_range": 0.02,
        "intermediate_size": cfg["intermediate_size"], "layer_norm_eps": 1e-05,
        "max_position_embeddings": cfg["max_position_embeddings"], "model_type": "clip_text_model",
        "num_attention_heads": cfg["num_attention_heads"], "num_hidden_layers": cfg["num_hidden_layers"],
        "pad_token_id": pad, "projection_dim": cfg["projection_dim"], "torch_dtype": "float32",
        "transformers_version": "4.33.2", "vocab_size": cfg["vocab_size"],
    }


WEIGHT_STEMS = {"unet": "diffusion_pytorch_model", "vae": "diffusion_pytorch_model", "text_encoder": "model"}


def write_diffusers_folder(folder, fam, sources, text_config_json, tokenizer_dir, files):
    """A diffusers pipeline folder. sources: component -> (name -> (shape,
    produce)) in diffusers/HF names. files: the WeightFiles written for each
    component, side by side."""
    write_json(os.path.join(folder, "model_index.json"), model_index(fam))
    write_json(os.path.join(folder, "scheduler", "scheduler_config.json"), fam["scheduler"])
    shutil.copytree(tokenizer_dir, os.path.join(folder, "tokenizer"))
    write_json(os.path.join(folder, "unet", "config.json"), fam["unet"])
    write_json(os.path.join(folder, "vae", "config.json"), fam["vae"])
    write_json(os.path.join(folder, "text_encoder", "config.json"), text_config_json)
    for component, source in sources.items():
        for weights in files:
            entries = entries_of(source, weights.dtype)
            stem = WEIGHT_STEMS[component]
            if component in weights.sharded:
                write_sharded(os.path.join(folder, component), stem, entries, SHARDS, weights.variant)
            else:
                write_safetensors(os.path.join(folder, component, add_variant(stem + ".safetensors",
                                                                              weights.variant)), entries)


# ------------------------------------------------------------------ ONNX

def onnx_inputs(fam, batch=2, latent=16):
    unet = fam["unet"]
    return {
        "text_encoder": (torch.zeros(batch, MAX_LENGTH, dtype=torch.int64),),
        "unet": (torch.zeros(batch, LATENT_CHANNELS, latent, latent), torch.tensor([981.0] * batch),
                 torch.zeros(batch, MAX_LENGTH, unet["cross_attention_dim"])),
        "vae_decoder": (torch.zeros(1, LATENT_CHANNELS, latent, latent),),
        "vae_encoder": (torch.zeros(1, 3, vae_factor(fam) * latent, vae_factor(fam) * latent),),
    }


# optimum's names and dynamic axes, as tools/make_tiny_sd.py writes tiny-sd.
ONNX_GRAPHS = {
    "text_encoder": (["input_ids"], ["last_hidden_state", "pooler_output"],
                     {"input_ids": {0: "batch", 1: "sequence"}, "last_hidden_state": {0: "batch", 1: "sequence"},
                      "pooler_output": {0: "batch"}}),
    "unet": (["sample", "timestep", "encoder_hidden_states"], ["out_sample"],
             {"sample": {0: "batch", 2: "height", 3: "width"}, "timestep": {0: "batch"},
              "encoder_hidden_states": {0: "batch", 1: "sequence"},
              "out_sample": {0: "batch", 2: "height", 3: "width"}}),
    "vae_decoder": (["latent_sample"], ["sample"], {"latent_sample": {0: "batch", 2: "height", 3: "width"},
                                                    "sample": {0: "batch", 2: "image_height", 3: "image_width"}}),
    "vae_encoder": (["sample"], ["latent_parameters"], {"sample": {0: "batch", 2: "height", 3: "width"},
                                                        "latent_parameters": {0: "batch", 2: "latent_height",
                                                                              3: "latent_width"}}),
}


def write_onnx_configs(folder, fam, text_config_json, graphs, tokenizer):
    """model_index.json, the scheduler and each graph's config.json."""
    write_json(os.path.join(folder, "model_index.json"), model_index(fam, list(graphs), tokenizer))
    write_json(os.path.join(folder, "scheduler", "scheduler_config.json"), fam["scheduler"])
    configs = {"text_encoder": text_config_json, "unet": fam["unet"], "vae_decoder": fam["vae"],
               "vae_encoder": fam["vae"]}
    for graph in graphs:
        write_json(os.path.join(folder, graph, "config.json"), configs[graph])


def write_onnx_folder(folder, fam, hf_text, unet, vae, text_config_json, tokenizer_dir):
    """optimum's ONNX folder for a tiny family, with make_tiny_sd's export()
    (its checker and KILN_OPS check; the UNet's weights in model.onnx_data)."""
    # No vae_encoder: image to image from an ONNX folder is tests/models/tiny-sd's.
    graphs = {"text_encoder": hf_text, "unet": unet, "vae_decoder": VaeDecode(vae)}
    write_onnx_configs(folder, fam, text_config_json, graphs, tokenizer=True)
    shutil.copytree(tokenizer_dir, os.path.join(folder, "tokenizer"))
    inputs = onnx_inputs(fam, latent=fam["unet"]["sample_size"] // 2)
    for name, model in graphs.items():
        input_names, output_names, axes = ONNX_GRAPHS[name]
        export(model, inputs[name], os.path.join(folder, name, "model.onnx"), input_names, output_names, axes,
               external_data=name == "unet")


def export_large(build, args, path, input_names, output_names, axes):
    """export() for models past protobuf's 2 GB: torch writes external data
    into a scratch folder; the model is then saved with all weights in one
    model.onnx_data beside it (optimum's layout) and checked from its path.
    build() makes the model, so that it is freed before the ONNX weights are
    read back: one copy of the weights in memory at a time after the export."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
        scratch = os.path.join(tmp, "model.onnx")
        model = build()
        with torch.no_grad():
            torch.onnx.export(model, args, scratch, input_names=input_names, output_names=output_names,
                              dynamic_axes=axes)
        del model
        gc.collect()
        m = onnx.load(scratch)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx_data", size_threshold=1024)
    unsupported = sorted({n.op_type for n in m.graph.node} - KILN_OPS)
    assert not unsupported, f"{path}: ops kiln does not support: {unsupported}"
    del m
    onnx.checker.check_model(path, full_check=True)
    print(f"   {path}: {os.path.getsize(path + '_data') / 1e9:.2f} GB of weights")


# ------------------------------------------------------------ references

def save_npy(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, array)


def compare(name, out32, out64):
    ref = out64.float().numpy()
    peak = float(np.abs(ref).max())
    err = float((out32.double() - out64).abs().max()) / peak
    print(f"   {name}: {list(ref.shape)} max|out| {peak:.4g}, torch float32 error {err:.2e} x max|out|")
    assert 0.1 <= peak <= 100, f"{name}: max|out| {peak} out of range; rescale the init"
    return ref


def write_model_reference(folder, name, fn, inputs, output_name):
    """<folder>/<name>/inputs/*.npy and outputs/<output_name>.npy: `fn`'s
    output in float64 (module and inputs cast to double) rounded to float32."""
    for k, v in inputs.items():
        save_npy(os.path.join(folder, name, "inputs", k + ".npy"), v.numpy())
    with torch.no_grad():
        out32 = fn(torch.float32)(*inputs.values())
        out64 = fn(torch.float64)(*(v.double() if v.is_floating_point() else v for v in inputs.values()))
    ref = compare(f"{name}/{output_name}", out32, out64)
    save_npy(os.path.join(folder, name, "outputs", output_name + ".npy"), ref)
    return ref


def in_dtype(model):
    """model(dtype) -> the model in that dtype (a double copy for float64)."""
    double = copy.deepcopy(model).double()
    return lambda dtype: model if dtype == torch.float32 else double


# Prompts for the text encoder references; the cases' below.
REFERENCE_PROMPTS = ["a photo of a cat", "an astronaut riding a horse on the moon"]
# (name, prompt, negative prompt, seed, steps, guidance, scheduler, init picture, strength)
CASES = {
    "sd1": [("euler_20", "a photo of a cat", "", 1, 20, 7.5, "euler", False, None),
            ("dpmpp_2m_negative", "a red apple on a wooden table", "green", 2, 6, 7.5, "dpmpp_2m", False, None),
            ("img2img_ddim", "a red circle on a blue background", "", 3, 10, 7.5, "ddim", True, 0.6)],
    "sd2": [("ddim_20", "a castle on a hill", "", 4, 20, 7.5, "ddim", False, None),
            ("euler_a_8", "a lighthouse on the coast", "", 5, 8, 7.5, "euler_a", False, None)],
}


def vae_factor(fam):
    return 2 ** (len(fam["vae"]["block_out_channels"]) - 1)


def case_size(fam):
    """The cases' image side: the UNet's sample_size in latents. A multiple
    of 8 latents, as the real UNets' three downsamplings need, so a pipeline
    may hold the tiny models to the real rule."""
    assert fam["unet"]["sample_size"] % 8 == 0
    return fam["unet"]["sample_size"] * vae_factor(fam)


def write_model_references(folder, fam, tokenizer, text_context, unet, vae):
    """Each network's float64 reference: the text encoder's context (what
    the pipeline feeds the UNet), the UNet, the VAE decoder and encoder."""
    gen = torch.Generator().manual_seed(2024)
    latent = fam["unet"]["sample_size"]
    ids = torch.tensor([tokenizer(p, MAX_LENGTH) for p in REFERENCE_PROMPTS], dtype=torch.int64)
    text_fn = in_dtype(text_context)
    context = write_model_reference(folder, "text_encoder", lambda d: (lambda x: text_fn(d)(x)[0]),
                                    {"input_ids": ids}, "hidden_states")
    unet_fn = in_dtype(unet)
    write_model_reference(folder, "unet", unet_fn, {
        "sample": torch.randn(2, LATENT_CHANNELS, latent, latent, generator=gen),
        "timestep": torch.tensor([981.0, 1.0]),
        "encoder_hidden_states": torch.from_numpy(context)}, "out_sample")
    vae_fn = in_dtype(vae)
    write_model_reference(folder, "vae_decoder", lambda d: vae_fn(d).decode,
                          {"latent_sample": torch.randn(1, LATENT_CHANNELS, latent, latent, generator=gen)}, "sample")
    image = vae_factor(fam) * latent
    write_model_reference(folder, "vae_encoder", lambda d: vae_fn(d).encode,
                          {"sample": torch.rand(1, 3, image, image, generator=gen) * 2 - 1}, "latent_parameters")


def write_cases(folder, fam, tokenizer, text_context, unet, vae):
    """Whole-pipeline cases in tiny-sd's format, from make_tiny_sd.generate()
    (float32 PyTorch pipeline, kiln_rng noise, scheduler_ref) with this
    family's tokenizer length, VAE factor and scaling, scheduler config."""
    spec = {"max_length": MAX_LENGTH, "factor": vae_factor(fam), "scaling_factor": SCALING_FACTOR,
            "scheduler": fam["scheduler"]}
    size = case_size(fam)
    for name, prompt, negative, seed, steps, guidance, scheduler, with_init, strength in CASES[fam["name"]]:
        case_folder = os.path.join(folder, name)
        case = {"prompt": prompt, "negative_prompt": negative, "seed": seed, "steps": steps,
                "guidance_scale": guidance, "scheduler": scheduler, "width": size, "height": size}
        init = init_picture(size, size) if with_init else None
        trajectory, _, pixels = generate(tokenizer, text_context, unet, vae.decode, vae.encode, prompt, negative,
                                         seed, steps, guidance, scheduler, size, size, init, strength, spec)
        if with_init:
            os.makedirs(case_folder, exist_ok=True)
            write_png(os.path.join(case_folder, "init.png"), init)
            case.update(init_image="init.png", strength=strength)
        write_reference_case(case_folder, trajectory, pixels, case)
        print(f"   cases/{name}: final latent max|x| {np.abs(trajectory[-1]).max():.3f}, "
              f"image mean {pixels.mean():.1f} std {pixels.std():.1f}")


# --------------------------------------------------------- tiny families

COMPONENTS = {"text_encoder": lambda fam: make_text_encoder(fam["text"]),
              "unet": lambda fam: UNet2DConditionModel(fam["unet"]),
              "vae": lambda fam: AutoencoderKL(fam["vae"])}


def build_component(fam, component, meta=False):
    """(model, init rules) of one of the family's networks; filled with its
    weights, or on the meta device (shapes only) when `meta`."""
    with MetaDevice() if meta else contextlib.nullcontext():
        model = COMPONENTS[component](fam)
    rules = init_rules(model, {"conv_out.": fam["unet_out_scale"]} if component == "unet" else None)
    if not meta:
        # SD 1.x and 2.x share one VAE (as the real ones share its
        # architecture): its files are then the same bytes in both families.
        seed_prefix = "sd/vae" if component == "vae" else f"{fam['name']}/{component}"
        fill_params(model, seed_prefix, rules)
    return model.eval(), rules


def param_count(model):
    return sum(p.numel() for p in model.parameters())


def check_text_conversion(text, hf_text, tokenizer):
    """SD2: the diffusers text encoder (converted, one layer fewer) must give
    the OpenCLIP one's context, as diffusers' converter promises."""
    if hf_text is text:
        return
    ids = torch.tensor([tokenizer(p, MAX_LENGTH) for p in REFERENCE_PROMPTS])
    with torch.no_grad():
        a, b = copy.deepcopy(text).double()(ids)[0], copy.deepcopy(hf_text).double()(ids)[0]
    assert float((a - b).abs().max()) < 1e-12, "OpenCLIP -> CLIPTextModel conversion differs"


def make_tiny_family(out, name, stats):
    """Everything for one tiny family: tokenizer, single files, diffusers
    and ONNX folders, references."""
    fam = dict(FAMILIES[name], name=name)
    tokenizer_dir = os.path.join(out, f"{name}-tokenizer")
    clip_bpe.write_tokenizer_dir(tokenizer_dir, pad_token=fam["pad_token"])
    tokenizer = clip_bpe.ClipTokenizer(tokenizer_dir)
    fam["text"] = dict(fam["text"], vocab_size=len(tokenizer.encoder))
    (text, _), (unet, _), (vae, _) = (build_component(fam, c) for c in COMPONENTS)
    hf_text = diffusers_text_encoder(text, fam["text"])
    text_json = clip_config_json(diffusers_text_config(fam["text"]),
                                 (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id))
    counts = {"text_encoder": param_count(text), "unet": param_count(unet), "vae": param_count(vae)}
    print(f"== {name}: vocab {len(tokenizer.encoder)}, params " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    stats[name] = {"params": counts}

    # Single files: whatever their dtype, the same (float16-representable) numbers.
    sources = {"unet": module_source(unet), "vae": module_source(vae), "text_encoder": module_source(text)}
    for file, dtype in fam["single_files"].items():
        parts = ldm_checkpoint(fam, sources["unet"], sources["vae"], sources["text_encoder"], dtype)
        stats[name][file] = write_ldm_file(os.path.join(out, file), parts)

    diffusers_sources = dict(sources, text_encoder=module_source(hf_text))
    for folder, files in fam["diffusers_folders"].items():
        write_diffusers_folder(os.path.join(out, folder), fam, diffusers_sources, text_json, tokenizer_dir, files)
    if fam["onnx_folder"]:
        write_onnx_folder(os.path.join(out, fam["onnx_folder"]), fam, hf_text, unet, vae, text_json, tokenizer_dir)

    check_text_conversion(text, hf_text, tokenizer)
    folder = os.path.join(out, "reference", name)
    write_model_references(folder, fam, tokenizer, text, unet, vae)
    write_cases(os.path.join(folder, "cases"), fam, tokenizer, text, unet, vae)


# ------------------------------------------------------------------ SDXL
# A tiny SDXL: two text encoders (CLIP ViT-L-like in transformers' layout,
# OpenCLIP bigG-like with a text_projection narrower than its width, so a
# transposed projection shows), a 3-level UNet whose first level has no
# attention and whose depths grow downwards, add_embedding over the pooled
# text and the six time ids (embedded 256 wide, as every SDXL's), the shared
# tiny VAE with SDXL's scaling factor.

SDXL_SCALING_FACTOR = 0.13025
# stabilityai/stable-diffusion-xl-base-1.0's scheduler_config.json.
SDXL_SCHEDULER = {"_class_name": "EulerDiscreteScheduler", "_diffusers_version": "0.19.0.dev0", "beta_end": 0.012,
                  "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
                  "interpolation_type": "linear", "num_train_timesteps": 1000, "prediction_type": "epsilon",
                  "sample_max_value": 1.0, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
                  "timestep_spacing": "leading", "trained_betas": None, "use_karras_sigmas": False}
SDXL_TIME_EMBED = 256


def sdxl_unet_config(channels, layers_per_block, depths, context_dim, text_embeds_dim, sample_size):
    """SDXL's unet/config.json: plain blocks where the depth is 0 (SDXL's
    first level), cross-attention below, heads of 64 channels (at least 1)."""
    cfg = unet_config(channels, layers_per_block, [max(1, c // 64) for c in channels], context_dim, True, False,
                      sample_size, 0)
    down = ["CrossAttnDownBlock2D" if d else "DownBlock2D" for d in depths]
    cfg.update(down_block_types=down, up_block_types=[k.replace("Down", "Up") for k in reversed(down)],
               transformer_layers_per_block=[max(1, d) for d in depths], addition_embed_type="text_time",
               addition_time_embed_dim=SDXL_TIME_EMBED,
               projection_class_embeddings_input_dim=text_embeds_dim + 6 * SDXL_TIME_EMBED)
    return cfg


SDXL_TEXT_2 = text_config("openclip", 64, 1, 3, 128, "gelu", None, projection_dim=48)
SDXL = {
    "name": "sdxl",
    "text": text_config("clip", 32, 1, 2, 64, "quick_gelu", None),
    "text_2": SDXL_TEXT_2,
    "unet": sdxl_unet_config([32, 64, 64], 1, [0, 1, 2], 32 + 64, SDXL_TEXT_2["projection_dim"], TINY_LATENT),
    "vae": dict(TINY_VAE, scaling_factor=SDXL_SCALING_FACTOR),
    "scheduler": SDXL_SCHEDULER, "unet_out_scale": 3.0,
}
LDM_SDXL_CLIP, LDM_SDXL_OPENCLIP = "conditioner.embedders.0.transformer.", "conditioner.embedders.1.model."
# (name, prompt, negative prompt, seed, steps, guidance, scheduler, timestep spacing)
SDXL_CASES = [("euler_20", "a photo of a cat", "", 1, 20, 7.5, "euler", None),
              ("dpmpp_2m_negative", "a red apple on a wooden table", "green", 2, 6, 5.0, "dpmpp_2m", None),
              ("turbo_1_step", "a cat", "", 3, 1, 0.0, "euler_a", "trailing"),
              ("turbo_4_steps", "a lighthouse on the coast", "", 4, 4, 0.0, "euler_a", "trailing")]


class SdxlText(nn.Module):
    """What kiln's SDXL text encoder graphs compute: the penultimate layer's
    output without the final norm; for the second encoder (`pooled`) also
    the pooled text, ln_final of the last layer at the end token (the
    largest id) times text_projection ([in, out], OpenCLIP's)."""

    def __init__(self, text, pooled):
        super().__init__()
        self.text, self.pooled = text, pooled

    def forward(self, input_ids):
        outs = self.text.layer_outputs(input_ids)
        if not self.pooled:
            return outs[-2]
        last = self.text.ln_final(outs[-1])[torch.arange(input_ids.shape[0]), input_ids.argmax(dim=-1)]
        return outs[-2], last @ self.text.text_projection


def sdxl_conditions(tokenizers, text, text_2):
    """make_tiny_sd.generate()'s conditions for SDXL, as diffusers'
    StableDiffusionXLPipeline makes them: both encoders' penultimate states
    side by side, the second's pooled text, time ids (original size, crop
    (0, 0), target size); an empty negative prompt (the first of two texts)
    all zeros, as force_zeros_for_empty_prompt has it."""
    def conditions(texts, width, height):
        ids = [torch.tensor([tok(t, MAX_LENGTH) for t in texts], dtype=torch.int64) for tok in tokenizers]
        with torch.no_grad():
            hidden_2, pooled = SdxlText(text_2, True)(ids[1])
            context = torch.cat([SdxlText(text, False)(ids[0]), hidden_2], dim=-1)
        if len(texts) == 2 and texts[0] == "":
            context[0], pooled[0] = 0, 0
        time_ids = torch.tensor([[height, width, 0, 0, height, width]] * len(texts), dtype=torch.float32)
        return context, pooled, time_ids
    return conditions


def sdxl_ldm_checkpoint(fam, sources, dtype):
    """SDXL's single file (sgm's layout): the UNet with label_emb, the VAE,
    conditioner.embedders.0.transformer.* (CLIP, transformers' names) and
    .1.model.* (OpenCLIP, text_projection included); (used, unused, ignored)."""
    levels = len(fam["vae"]["block_out_channels"])
    used = {LDM_UNET + unet_key_to_ldm(n, fam["unet"]): Entry(dtype, shape, produce)
            for n, (shape, produce) in sources["unet"].items()}
    ignored = {(LDM_SDXL_CLIP + k[len(LDM_CLIP):] if k.startswith(LDM_CLIP) else k): e
               for k, e in ldm_ignored_entries(fam, used).items()}
    for name, (shape, produce) in sources["vae"].items():
        ldm = vae_key_to_ldm(name, levels)
        ldm_shape = vae_ldm_shape(ldm, shape)
        used[LDM_VAE + ldm] = Entry(dtype, ldm_shape, lambda p=produce, s=ldm_shape: p().reshape(s))
    for name, (shape, produce) in sources["text_encoder"].items():
        used[LDM_SDXL_CLIP + name] = Entry(dtype, shape, produce)
    for name, (shape, produce) in sources["text_encoder_2"].items():
        (ignored if name == "logit_scale" else used)[LDM_SDXL_OPENCLIP + name] = Entry(dtype, shape, produce)
    return used, {}, ignored


def sdxl_hf_text_2(text_2, cfg):
    """diffusers' text_encoder_2: transformers' CLIPTextModelWithProjection
    over the OpenCLIP weights (every layer), text_projection as a Linear
    weight [out, in]: the source of its folder's weights."""
    state = {k: v.detach().clone() for k, v in
             openclip_to_hf(text_2.state_dict(), cfg, cfg["num_hidden_layers"]).items()}
    state["text_projection.weight"] = text_2.text_projection.detach().t().contiguous()
    return {name: (tuple(t.shape), lambda t=t: t.numpy()) for name, t in state.items()}


def write_sdxl_folder(folder, fam, sources, text_jsons, tokenizer_dirs):
    """SDXL's diffusers folder: two text encoders and tokenizers, F16 weights."""
    index = {"_class_name": "StableDiffusionXLPipeline", "_diffusers_version": DIFFUSERS_VERSION,
             "force_zeros_for_empty_prompt": True, "scheduler": ["diffusers", "EulerDiscreteScheduler"],
             "text_encoder": ["transformers", "CLIPTextModel"], "text_encoder_2": ["transformers",
                                                                                   "CLIPTextModelWithProjection"],
             "tokenizer": ["transformers", "CLIPTokenizer"], "tokenizer_2": ["transformers", "CLIPTokenizer"],
             "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]}
    write_json(os.path.join(folder, "model_index.json"), index)
    write_json(os.path.join(folder, "scheduler", "scheduler_config.json"), fam["scheduler"])
    write_json(os.path.join(folder, "unet", "config.json"), fam["unet"])
    write_json(os.path.join(folder, "vae", "config.json"), fam["vae"])
    for component, tokenizer in (("text_encoder", "tokenizer"), ("text_encoder_2", "tokenizer_2")):
        write_json(os.path.join(folder, component, "config.json"), text_jsons[component])
        shutil.copytree(tokenizer_dirs[component], os.path.join(folder, tokenizer))
    for component, source in sources.items():
        stem = "model" if component.startswith("text_encoder") else "diffusion_pytorch_model"
        write_safetensors(os.path.join(folder, component, stem + ".safetensors"), entries_of(source, "F16"))


SDXL_TOKENIZER_DIRS = {"text_encoder": "sdxl-tokenizer", "text_encoder_2": "sdxl-tokenizer-2"}


def tiny_sdxl(out):
    """(family with the tokenizers' vocabulary, tokenizers, text, text_2,
    unet): the tiny SDXL's networks, its tokenizers read from `out`."""
    fam = dict(SDXL, name="sdxl")
    tokenizers = [clip_bpe.ClipTokenizer(os.path.join(out, d)) for d in SDXL_TOKENIZER_DIRS.values()]
    vocab = len(tokenizers[0].encoder)
    fam["text"], fam["text_2"] = dict(fam["text"], vocab_size=vocab), dict(fam["text_2"], vocab_size=vocab)
    text = build_component(fam, "text_encoder")[0]
    text_2 = build_component(dict(fam, text=fam["text_2"]), "text_encoder")[0]
    fill_params(text_2, "sdxl/text_encoder_2", init_rules(text_2))
    return fam, tokenizers, text, text_2, build_component(fam, "unet")[0]


def tiny_sd1(out):
    """sd1's family with its tokenizer's vocabulary, and the tokenizer."""
    tokenizer = clip_bpe.ClipTokenizer(os.path.join(out, "sd1-tokenizer"))
    fam = dict(FAMILIES["sd1"], name="sd1")
    fam["text"] = dict(fam["text"], vocab_size=len(tokenizer.encoder))
    return fam, tokenizer


def make_tiny_sdxl(out, stats):
    dirs = {c: os.path.join(out, d) for c, d in SDXL_TOKENIZER_DIRS.items()}
    clip_bpe.write_tokenizer_dir(dirs["text_encoder"], pad_token=clip_bpe.EOS)
    clip_bpe.write_tokenizer_dir(dirs["text_encoder_2"], pad_token="!")
    fam, tokenizers, text, text_2, unet = tiny_sdxl(out)
    vocab = len(tokenizers[0].encoder)
    vae = build_component(fam, "vae")[0]
    counts = {"text_encoder": param_count(text), "text_encoder_2": param_count(text_2), "unet": param_count(unet),
              "vae": param_count(vae)}
    print("== sdxl: vocab {}, params {}".format(vocab, ", ".join(f"{k} {v}" for k, v in counts.items())))
    stats["sdxl"] = {"params": counts}
    sources = {"unet": module_source(unet), "vae": module_source(vae), "text_encoder": module_source(text),
               "text_encoder_2": module_source(text_2)}
    stats["sdxl"]["sdxl.safetensors"] = write_ldm_file(os.path.join(out, "sdxl.safetensors"),
                                                       sdxl_ldm_checkpoint(fam, sources, "F16"))
    special = [(t.bos_id, t.eos_id, t.pad_id) for t in tokenizers]
    text_jsons = {"text_encoder": clip_config_json(fam["text"], special[0]),
                  "text_encoder_2": dict(clip_config_json(dict(fam["text_2"], arch="clip"), special[1]),
                                         architectures=["CLIPTextModelWithProjection"])}
    write_sdxl_folder(os.path.join(out, "sdxl-diffusers"), fam,
                      dict(sources, text_encoder_2=sdxl_hf_text_2(text_2, fam["text_2"])), text_jsons, dirs)

    # References: each network, then whole generations.
    folder = os.path.join(out, "reference", "sdxl")
    gen = torch.Generator().manual_seed(2025)
    ids = [torch.tensor([t(p, MAX_LENGTH) for p in REFERENCE_PROMPTS], dtype=torch.int64) for t in tokenizers]
    first = in_dtype(SdxlText(text, False))
    context_1 = write_model_reference(folder, "text_encoder", first, {"input_ids": ids[0]}, "hidden_states")
    second = in_dtype(SdxlText(text_2, True))
    context_2 = write_model_reference(folder, "text_encoder_2", lambda d: (lambda x: second(d)(x)[0]),
                                      {"input_ids": ids[1]}, "hidden_states")
    pooled = write_model_reference(folder, "text_encoder_2", lambda d: (lambda x: second(d)(x)[1]),
                                   {"input_ids": ids[1]}, "text_embeds")
    latent = fam["unet"]["sample_size"]
    side = float(latent * vae_factor(fam))
    write_model_reference(folder, "unet", in_dtype(unet), {
        "sample": torch.randn(2, LATENT_CHANNELS, latent, latent, generator=gen),
        "timestep": torch.tensor([981.0, 1.0]),
        "encoder_hidden_states": torch.from_numpy(np.concatenate([context_1, context_2], axis=-1)),
        "text_embeds": torch.from_numpy(pooled),
        "time_ids": torch.tensor([[side, side, 0.0, 0.0, side, side], [2 * side, side, 4.0, 8.0, side, side]])},
        "out_sample")
    spec = {"max_length": MAX_LENGTH, "factor": vae_factor(fam), "scaling_factor": SDXL_SCALING_FACTOR,
            "scheduler": fam["scheduler"]}
    size = case_size(fam)
    conditions = sdxl_conditions(tokenizers, text, text_2)
    for name, prompt, negative, seed, steps, guidance, scheduler, spacing in SDXL_CASES:
        case = {"prompt": prompt, "negative_prompt": negative, "seed": seed, "steps": steps,
                "guidance_scale": guidance, "scheduler": scheduler, "width": size, "height": size}
        if spacing:
            case.update(timestep_spacing=spacing)
        trajectory, _, pixels = generate(None, None, unet, vae.decode, vae.encode, prompt, negative, seed, steps,
                                         guidance, scheduler, size, size, spec=spec, spacing=spacing,
                                         conditions=conditions)
        write_reference_case(os.path.join(folder, "cases", name), trajectory, pixels, case)
        print(f"   cases/{name}: final latent max|x| {np.abs(trajectory[-1]).max():.3f}, "
              f"image mean {pixels.mean():.1f} std {pixels.std():.1f}")


# ------------------------------------------------------------------- LCM
# A full LCM UNet (LCM_Dreamshaper_v7's kind): sd1's architecture with
# time_cond_proj_dim, its guidance embedded (timestep_cond) instead of a CFG
# batch, in a diffusers folder with sd1's text encoder and VAE and
# LCMScheduler's config.

LCM_COND_DIM = 32  # LCM_Dreamshaper_v7's is 256
# SimianLuo/LCM_Dreamshaper_v7's scheduler_config.json.
LCM_SCHEDULER = {"_class_name": "LCMScheduler", "_diffusers_version": "0.22.0.dev0", "beta_end": 0.012,
                 "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
                 "clip_sample_range": 1.0, "dynamic_thresholding_ratio": 0.995, "num_train_timesteps": 1000,
                 "original_inference_steps": 50, "prediction_type": "epsilon", "rescale_betas_zero_snr": False,
                 "sample_max_value": 1.0, "set_alpha_to_one": True, "steps_offset": 1, "thresholding": False,
                 "timestep_scaling": 10.0, "timestep_spacing": "leading", "trained_betas": None}
# (name, prompt, seed, steps, guidance): the guidance is embedded, never a CFG batch.
LCM_CASES = [("lcm_4_steps", "a photo of a cat", 1, 4, 8.0), ("lcm_2_steps_low_guidance", "a red apple", 2, 2, 2.0)]


def guidance_embedding(w, dim):
    """diffusers' LatentConsistencyModelPipeline.get_guidance_scale_embedding."""
    w = w * 1000.0
    half = dim // 2
    emb = torch.exp(torch.arange(half, dtype=torch.float32) * -(torch.log(torch.tensor(10000.0)) / (half - 1)))
    emb = w.to(torch.float32)[:, None] * emb[None, :]
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)


def make_tiny_lcm(out, stats):
    sd1, tokenizer = tiny_sd1(out)
    fam = dict(sd1, name="lcm", unet=dict(sd1["unet"], time_cond_proj_dim=LCM_COND_DIM), scheduler=LCM_SCHEDULER)
    text, vae = build_component(sd1, "text_encoder")[0], build_component(sd1, "vae")[0]
    unet = build_component(fam, "unet")[0]
    stats["lcm"] = {"params": {"unet": param_count(unet)}}
    print(f"== lcm: unet params {param_count(unet)}, time_cond_proj_dim {LCM_COND_DIM}")
    text_json = clip_config_json(diffusers_text_config(sd1["text"]),
                                 (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id))
    sources = {"unet": module_source(unet), "vae": module_source(vae), "text_encoder": module_source(text)}
    write_diffusers_folder(os.path.join(out, "lcm-diffusers"), fam, sources, text_json,
                           os.path.join(out, "sd1-tokenizer"), [WeightFiles("F16", None, ())])
    folder = os.path.join(out, "reference", "lcm")
    gen = torch.Generator().manual_seed(2026)
    ids = torch.tensor([tokenizer(p, MAX_LENGTH) for p in REFERENCE_PROMPTS], dtype=torch.int64)
    with torch.no_grad():
        context = text(ids)[0]
    latent = fam["unet"]["sample_size"]
    unet_fn = in_dtype(unet)
    write_model_reference(folder, "unet", lambda d: (lambda s, t, c, w: unet_fn(d)(s, t, c, None, None, w)), {
        "sample": torch.randn(2, LATENT_CHANNELS, latent, latent, generator=gen),
        "timestep": torch.tensor([999.0, 259.0]), "encoder_hidden_states": context,
        "timestep_cond": guidance_embedding(torch.tensor([7.0, 1.0]), LCM_COND_DIM)}, "out_sample")
    spec = {"max_length": MAX_LENGTH, "factor": vae_factor(fam), "scaling_factor": SCALING_FACTOR,
            "scheduler": fam["scheduler"]}
    size = case_size(fam)
    for name, prompt, seed, steps, guidance in LCM_CASES:
        def conditions(texts, width, height, guidance=guidance):
            ids = torch.tensor([tokenizer(t, MAX_LENGTH) for t in texts], dtype=torch.int64)
            with torch.no_grad():
                context = text(ids)[0]
            w = guidance_embedding(torch.tensor([guidance - 1.0] * len(texts)), LCM_COND_DIM)
            return context, None, None, w
        # guidance 1 to generate(): the model's own guidance is the embedding, not a CFG batch.
        trajectory, _, pixels = generate(None, None, unet, vae.decode, vae.encode, prompt, "", seed, steps, 1.0,
                                         "lcm", size, size, spec=spec, conditions=conditions)
        case = {"prompt": prompt, "negative_prompt": "", "seed": seed, "steps": steps, "guidance_scale": guidance,
                "scheduler": "lcm", "width": size, "height": size}
        write_reference_case(os.path.join(folder, "cases", name), trajectory, pixels, case)
        print(f"   cases/{name}: final latent max|x| {np.abs(trajectory[-1]).max():.3f}, "
              f"image mean {pixels.mean():.1f} std {pixels.std():.1f}")


# ------------------------------------------------------------------ LoRA
# LoRA files for sd1 in the layouts users hold, and PyTorch's outputs of the
# networks with the same merge, W + weight * alpha / rank * up . down:
# Linear layers (attention, feed-forward, the text encoder's), a 1x1 conv
# (SD 1.x's proj_in) and a 3x3 conv (LoCon's), all rank 4, alpha 2.

LORA_RANK, LORA_ALPHA, LORA_WEIGHT = 4, 2.0, 0.7
LORA_MODULES = {
    "unet": ["down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q",
             "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k",
             "down_blocks.0.attentions.0.proj_in",
             "up_blocks.1.attentions.2.transformer_blocks.0.ff.net.0.proj",
             "mid_block.resnets.0.conv1"],
    "text_encoder": ["text_model.encoder.layers.0.self_attn.q_proj", "text_model.encoder.layers.1.mlp.fc1"],
}


def lora_matrices(component, module, weight):
    """(down, up) for `module`'s weight, drawn from its name, float16-exact."""
    out, rest = weight.shape[0], weight.shape[1:]
    gen = torch.Generator().manual_seed(int(hashlib.sha256(f"lora/{component}/{module}".encode()).hexdigest()[:8], 16))
    down = (torch.randn((LORA_RANK, *rest), generator=gen) * math.prod(rest) ** -0.5).half().float()
    up_shape = (out, LORA_RANK) + (1,) * (len(rest) - 1)
    up = (torch.randn(up_shape, generator=gen) * 0.5).half().float()
    return down, up


def lora_delta(down, up):
    return (up.reshape(up.shape[0], -1).double() @ down.reshape(down.shape[0], -1).double())


def make_tiny_loras(out, stats):
    fam, _ = tiny_sd1(out)
    models = {"unet": build_component(fam, "unet")[0], "text_encoder": build_component(fam, "text_encoder")[0]}
    kohya, kohya_ldm, peft = {}, {}, {}
    for component, modules in LORA_MODULES.items():
        params = dict(models[component].named_parameters())
        for module in modules:
            w = params[module + ".weight"]
            down, up = lora_matrices(component, module, w)
            with torch.no_grad():
                w += (LORA_WEIGHT * LORA_ALPHA / LORA_RANK * lora_delta(down, up)).reshape(w.shape).float()
            prefix = "lora_unet_" if component == "unet" else "lora_te_"
            for table, name in ((kohya, module.replace(".", "_")),
                                (kohya_ldm, (unet_key_to_ldm(module + ".weight", fam["unet"])[:-len(".weight")]
                                             if component == "unet" else module).replace(".", "_"))):
                table[f"{prefix}{name}.lora_down.weight"] = down
                table[f"{prefix}{name}.lora_up.weight"] = up
                table[f"{prefix}{name}.alpha"] = torch.tensor(LORA_ALPHA)
            # diffusers / PEFT: no alpha (PEFT keeps it in adapter_config.json), up scaled by alpha / rank
            # (a power of two: exact) so the merge is the same.
            peft[f"{component}.{module}.lora_A.weight"] = down
            peft[f"{component}.{module}.lora_B.weight"] = up * (LORA_ALPHA / LORA_RANK)
    # A module this model lacks: listed as unmatched, not an error.
    peft["unet.down_blocks.7.attentions.0.proj_in.lora_A.weight"] = torch.zeros(LORA_RANK, 32)
    peft["unet.down_blocks.7.attentions.0.proj_in.lora_B.weight"] = torch.zeros(32, LORA_RANK)
    for name, table in (("lora-sd1-kohya", kohya), ("lora-sd1-kohya-ldm", kohya_ldm), ("lora-sd1-peft", peft)):
        entries = {k: Entry("F16", tuple(v.shape), lambda v=v: v.numpy()) for k, v in table.items()}
        write_safetensors(os.path.join(out, name + ".safetensors"), entries)
    stats["lora"] = {"params": {"modules": sum(len(m) for m in LORA_MODULES.values()), "rank": LORA_RANK}}
    print(f"== lora: {sum(len(m) for m in LORA_MODULES.values())} modules, rank {LORA_RANK}, alpha {LORA_ALPHA}, "
          f"merged at {LORA_WEIGHT}")
    # The merged networks on sd1's reference inputs.
    folder = os.path.join(out, "reference", "lora")
    ref = os.path.join(out, "reference", "sd1")
    load = lambda network, name: torch.from_numpy(np.load(os.path.join(ref, network, "inputs", name + ".npy")))
    text_fn = in_dtype(models["text_encoder"])
    write_model_reference(folder, "text_encoder", lambda d: (lambda x: text_fn(d)(x)[0]),
                          {"input_ids": load("text_encoder", "input_ids")}, "hidden_states")
    write_model_reference(folder, "unet", in_dtype(models["unet"]),
                          {n: load("unet", n) for n in ("sample", "timestep", "encoder_hidden_states")}, "out_sample")
    make_sdxl_lora(out)


# kohya's SDXL LoRAs: the UNet's modules by LDM's names, lora_te1_ (CLIP) and
# lora_te2_ (OpenCLIP, whose q/k/v are rows of its packed in_proj).
SDXL_LORA_MODULES = {
    "unet": ["down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v", "mid_block.attentions.0.proj_in",
             "up_blocks.0.attentions.1.transformer_blocks.1.ff.net.2", "down_blocks.0.resnets.0.conv2"],
    "text_encoder": ["text_model.encoder.layers.0.self_attn.q_proj"],
    "text_encoder_2": ["text_model.encoder.layers.1.self_attn.k_proj", "text_model.encoder.layers.2.mlp.fc1"],
}


def openclip_param(text_2, module):
    """The OpenCLIP tensor (a row slice for q/k/v) holding transformers' `module`'s weight."""
    m = re.fullmatch(r"text_model\.encoder\.layers\.(\d+)\.(.+)", module)
    block, rest = text_2.transformer.resblocks[int(m[1])], m[2]
    if rest.startswith("self_attn.") and rest[len("self_attn."):] in ("q_proj", "k_proj", "v_proj"):
        d = block.attn.out_proj.weight.shape[0]
        k = "qkv".index(rest[len("self_attn.")])
        return block.attn.in_proj_weight[k * d:(k + 1) * d]
    return {"mlp.fc1": block.mlp.c_fc.weight, "mlp.fc2": block.mlp.c_proj.weight}[rest]


def make_sdxl_lora(out):
    fam, _, text, text_2, unet = tiny_sdxl(out)
    kohya = {}
    prefixes = {"unet": "lora_unet_", "text_encoder": "lora_te1_", "text_encoder_2": "lora_te2_"}
    for component, modules in SDXL_LORA_MODULES.items():
        for module in modules:
            if component == "text_encoder_2":
                w = openclip_param(text_2, module)
            else:
                w = dict((unet if component == "unet" else text).named_parameters())[module + ".weight"]
            down, up = lora_matrices(component, module, w)
            with torch.no_grad():  # rounded to float16, as the merge into sdxl.safetensors' F16 weights is
                w.copy_((w.double() + LORA_WEIGHT * LORA_ALPHA / LORA_RANK * lora_delta(down, up).reshape(w.shape))
                        .float().half().float())
            name = unet_key_to_ldm(module + ".weight", fam["unet"])[:-len(".weight")] if component == "unet" else module
            key = prefixes[component] + name.replace(".", "_")
            kohya.update({f"{key}.lora_down.weight": down, f"{key}.lora_up.weight": up,
                          f"{key}.alpha": torch.tensor(LORA_ALPHA)})
    write_safetensors(os.path.join(out, "lora-sdxl-kohya.safetensors"),
                      {k: Entry("F16", tuple(v.shape), lambda v=v: v.numpy()) for k, v in kohya.items()})
    folder, ref = os.path.join(out, "reference", "lora-sdxl"), os.path.join(out, "reference", "sdxl")
    load = lambda network, name: torch.from_numpy(np.load(os.path.join(ref, network, "inputs", name + ".npy")))
    write_model_reference(folder, "text_encoder", in_dtype(SdxlText(text, False)),
                          {"input_ids": load("text_encoder", "input_ids")}, "hidden_states")
    second = in_dtype(SdxlText(text_2, True))
    write_model_reference(folder, "text_encoder_2", lambda d: (lambda x: second(d)(x)[0]),
                          {"input_ids": load("text_encoder_2", "input_ids")}, "hidden_states")
    names = ("sample", "timestep", "encoder_hidden_states", "text_embeds", "time_ids")
    write_model_reference(folder, "unet", in_dtype(unet), {n: load("unet", n) for n in names}, "out_sample")


# ------------------------------------------------------------- full size

def full_size(args):
    """--full: the real architecture's single file, drawn tensor by tensor."""
    fam = dict(full_family(args.full, args.scale), name=args.full)
    models = {c: build_component(fam, c, meta=True) for c in COMPONENTS}
    if "text_2" in fam:  # SDXL's second text encoder
        models["text_encoder_2"] = build_component(dict(fam, text=fam["text_2"]), "text_encoder", meta=True)
    sources = {c: lazy_source(f"{args.full}/{c}", rules) for c, (_, rules) in models.items()}
    dtype = args.dtype.upper()
    if "text_2" in fam:
        used, unused, ignored = sdxl_ldm_checkpoint(fam, sources, dtype)
    else:
        used, unused, ignored = ldm_checkpoint(fam, sources["unet"], sources["vae"], sources["text_encoder"], dtype)
    entries = {**used, **unused, **ignored}
    size = sum(math.prod(e.shape) * ST_DTYPES[e.dtype].itemsize for e in entries.values())
    print(f"== {args.full} (widths / {args.scale}): params " +
          ", ".join(f"{c} {param_count(m)}" for c, (m, _) in models.items()) +
          f"; keys used {len(used)}, unused {len(unused)}, ignored {len(ignored)}; {size / 1e9:.3f} GB as {dtype}")
    if args.list:
        for name in sorted(entries):
            print(f"   {name} {entries[name].dtype} {list(entries[name].shape)}")
        return
    if args.out:
        write_safetensors(args.out, entries)
        print(f"   wrote {args.out}: {os.path.getsize(args.out) / 1e9:.3f} GB")
    if args.onnx:
        if "text_2" in fam:
            sys.exit("--onnx: SDXL's ONNX export is not written here")
        export_full_onnx(args.onnx, fam)


def full_onnx_model(fam, graph):
    """The float32 module optimum would export as `graph`, holding the same
    numbers as the single file."""
    if graph == "text_encoder":
        return diffusers_text_encoder(build_component(fam, "text_encoder")[0], fam["text"])
    if graph == "unet":
        return build_component(fam, "unet")[0]
    return VaeDecode(build_component(fam, "vae")[0])


def export_full_onnx(folder, fam):
    """The full-size text encoder, UNet and VAE decoder in optimum's ONNX
    layout (no tokenizer: the random weights have no real vocabulary to
    pair with), one network in memory at a time."""
    graphs = ["text_encoder", "unet", "vae_decoder"]
    pad = CLIP_EOS_ID if fam["pad_token"] == clip_bpe.EOS else 0
    write_onnx_configs(folder, fam, clip_config_json(diffusers_text_config(fam["text"]),
                                                     (CLIP_BOS_ID, CLIP_EOS_ID, pad)), graphs, tokenizer=False)
    inputs = onnx_inputs(fam, latent=8)
    for graph in graphs:
        input_names, output_names, axes = ONNX_GRAPHS[graph]
        export_large(lambda: full_onnx_model(fam, graph), inputs[graph], os.path.join(folder, graph, "model.onnx"),
                     input_names, output_names, axes)
        gc.collect()


# ------------------------------------------------------------------ main

README_HEAD = """# sd-checkpoints

Tiny Stable Diffusion 1.x / 2.x / XL models with random weights, in the file layouts users
hold, and PyTorch's outputs for them: test data for kiln's native checkpoint loaders.
Generated by `tools/make_tiny_checkpoints.py`, do not edit; regenerate with
`/usr/bin/python3 tools/make_tiny_checkpoints.py` (deterministic: identical files every run).

All layouts of a family hold the same numbers (float16-representable, so F32 and F16
files agree exactly). Architectures (diffusers configs in the folders' config.json):

- sd1: CLIP text encoder (HF layout, 64 wide, 1 head, MLP 128, 2 layers, quick_gelu); UNet
  block_out_channels [32, 32], layers_per_block 2, CrossAttnDown + Down / Up + CrossAttnUp,
  8 heads, 1x1-conv proj_in/out, context 64.
- sd2: OpenCLIP text encoder (64 wide, 1 head, MLP 128, 3 resblocks, gelu; context =
  ln_final(penultimate), the last resblock and text_projection stored but unused); UNet
  [64, 64], layers_per_block 1, heads C/64, Linear proj_in/out, upcast_attention, context 64;
  v-prediction (DDIM).
- sdxl: two text encoders, CLIP (HF layout, 32 wide, 1 head, 2 layers, quick_gelu) and OpenCLIP
  (64 wide, 1 head, 3 resblocks, gelu, text_projection 64 -> 48); the context is both
  penultimate layers without the final norm side by side (96 wide), the pooled text the second's
  ln_final at the end token through text_projection. UNet [32, 64, 64], layers_per_block 1, no
  attention at the first level and transformer depths 1 and 2 below (middle 2), heads C/64,
  Linear proj_in/out, add_embedding over the pooled text and the 6 time ids embedded 256 wide;
  VAE scaling factor 0.13025; SDXL base's scheduler (Euler, leading); an empty negative prompt
  is zeros.
- VAE of all: [32, 64] (factor 2), 1 resnet a level (2 in the decoder), a channel change with
  its nin_shortcut in the encoder and in the decoder. Latents of the references and cases are
  16 x 16, so images are 32 x 32.

| path | what |
| --- | --- |
| `sd1-tokenizer/`, `sd2-tokenizer/` | tokenizer files (SD1 pads with EOS, SD2 with `!`, id 0) |
| `tokenizer/` | vocab.json and merges.txt alone: what kiln finds beside a single file |
| `sd1.safetensors` | single-file LDM checkpoint, F32 (buffers F32, I64, I32) |
| `sd2.safetensors` | same for sd2, F16 (`cond_stage_model.model.*` OpenCLIP) |
| `sd1-diffusers/` | diffusers folder, `.fp16.safetensors` variant files only |
| `sd1-diffusers-sharded/` | F32: unet, text_encoder in 2 shards + `*.safetensors.index.json`, vae whole; and the `.fp16.safetensors` files of `sd1-diffusers/` (identical bytes) side by side |
| `sd2-diffusers/` | `.fp16` only; unet in 2 shards named as diffusers names a variant's (`diffusion_pytorch_model.fp16-0000k-of-00002.safetensors`, `diffusion_pytorch_model.safetensors.index.fp16.json`); text_encoder = OpenCLIP converted (2 layers, gelu) |
| `sd1-onnx/` | the sd1 weights in optimum's ONNX layout, F32 (as `tests/models/tiny-sd`) |
| `sdxl.safetensors` | SDXL single file in sgm's layout, F16 (`conditioner.embedders.0.transformer.*`, `conditioner.embedders.1.model.*`, `label_emb`) |
| `sdxl-diffusers/` | SDXL diffusers folder, F16: `text_encoder_2` as CLIPTextModelWithProjection, `tokenizer_2` padding with `!` |
| `sdxl-tokenizer/`, `sdxl-tokenizer-2/` | SDXL's two tokenizers (EOS padding, `!` padding) |
| `lora-sd1-kohya.safetensors`, `lora-sd1-kohya-ldm.safetensors`, `lora-sd1-peft.safetensors` | a LoRA for sd1 (Linear, 1x1 and 3x3 conv modules of the UNet, two of the text encoder; rank 4, alpha 2) in kohya's layout with diffusers' and with LDM's module names, and in diffusers/PEFT's (up pre-scaled by alpha/rank, one module sd1 lacks) |
| `lora-sdxl-kohya.safetensors` | a LoRA for sdxl in kohya's SDXL layout: the UNet's modules by LDM's names, `lora_te1_` and `lora_te2_` (one a row block of OpenCLIP's packed in_proj) |
| `lcm-diffusers/` | a full LCM UNet (sd1's architecture with `time_cond_proj_dim` 32: `time_embedding.cond_proj`), sd1's text encoder and VAE, LCMScheduler's config; F16 |
| `reference/<family>/<model>/` | `inputs/*.npy`, `outputs/*.npy`: float64 references stored float32 |
| `.../text_encoder/` | input_ids -> hidden_states, the context the pipeline feeds the UNet (SDXL: the first encoder's part) |
| `reference/sdxl/text_encoder_2/` | input_ids -> hidden_states and text_embeds (the pooled text) |
| `reference/lora/{unet,text_encoder}/` | sd1's networks with the LoRA merged at 0.7, on sd1's reference inputs |
| `reference/lora-sdxl/{unet,text_encoder,text_encoder_2}/` | sdxl's networks with its LoRA merged at 0.7, on sdxl's reference inputs |
| `reference/lcm/unet/` | the LCM UNet, its guidance embedding as the input `timestep_cond` |
| `.../unet/`, `vae_decoder/`, `vae_encoder/` | -> out_sample; post_quant_conv + decoder; encoder + quant_conv |
| `reference/<family>/cases/<case>/` | whole-pipeline cases in tiny-sd's format (`case.json`, ...) |

Ignored keys in the single files (loaders must skip them): LDM schedule buffers (`betas`,
`alphas_cumprod`, ...), `model_ema.decay`, `model_ema.num_updates`, EMA copies of six UNet
tensors (`model_ema.diffusion_model<key without dots>`, values negated), SD1's
`...embeddings.position_ids`, SD2's `logit_scale`.

## Sizes
"""


def write_readme(out, stats):
    """README.md: what is here (README_HEAD), each top-level entry's size,
    the total of distinct file contents (what git stores) and the parameter
    and key counts; computed from the files, so it cannot go stale."""
    sizes = entry_sizes(out)
    distinct = distinct_size(out)
    lines = [README_HEAD, "| entry | bytes |", "| --- | --- |"]
    lines += [f"| `{entry}` | {size} |" for entry, size in sizes]
    lines += [f"| total | {sum(size for _, size in sizes)} |",
              f"| distinct contents (identical files counted once, as git stores them) | {distinct} |",
              "", "## Counts", "",
              "Single-file keys: used by the pipeline, unused (stored weights no SD pipeline reads) and",
              "ignored (see above).", ""]
    for name, s in stats.items():
        lines.append(f"- {name} parameters: " + ", ".join(f"{k} {v}" for k, v in s["params"].items()))
        for file, keys in s.items():
            if file != "params":
                lines.append(f"- `{file}` keys: " + ", ".join(f"{k} {v}" for k, v in keys.items()))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return sizes, distinct


def entry_files(path):
    return [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs] if os.path.isdir(path) else [path]


def entry_sizes(out):
    """(name, bytes) of each entry of `out` but README.md, folders summed."""
    return [(entry, sum(os.path.getsize(f) for f in entry_files(os.path.join(out, entry))))
            for entry in sorted(os.listdir(out)) if entry != "README.md"]


def distinct_size(out):
    """Bytes of the distinct file contents under `out` but README.md."""
    sizes = {}
    for f in entry_files(out):
        if os.path.relpath(f, out) != "README.md":
            with open(f, "rb") as fh:
                sizes[hashlib.sha256(fh.read()).hexdigest()] = os.path.getsize(f)
    return sum(sizes.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="output folder (default tests/models/sd-checkpoints), or with --full the "
                                      ".safetensors file")
    parser.add_argument("--full", choices=["sd15", "sd21", "sdxl"],
                        help="write a full-size random-weight single file")
    parser.add_argument("--dtype", choices=["f16", "f32"], default="f16", help="--full: the weights' dtype")
    parser.add_argument("--onnx", metavar="DIR", help="--full: also export UNet, text encoder, VAE decoder to ONNX")
    parser.add_argument("--list", action="store_true", help="--full: print the names and shapes, write nothing")
    parser.add_argument("--scale", type=int, default=1, help=argparse.SUPPRESS)  # --full widths / N, for checks
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.full:
        full_size(args)
        return 0
    out = args.out or "tests/models/sd-checkpoints"
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    stats = {}
    for name in FAMILIES:
        make_tiny_family(out, name, stats)
    make_tiny_sdxl(out, stats)
    make_tiny_lcm(out, stats)
    make_tiny_loras(out, stats)
    # What a single file needs of a tokenizer, beside it (kiln looks in
    # <checkpoint's folder>/tokenizer): the two tables; the family sets the padding.
    os.makedirs(os.path.join(out, "tokenizer"))
    for table in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(out, "sd1-tokenizer", table), os.path.join(out, "tokenizer", table))
    sizes, distinct = write_readme(out, stats)
    for entry, size in sizes:
        print(f"   {entry}: {size / 1e6:.2f} MB")
    print(f"== total {sum(size for _, size in sizes) / 1e6:.2f} MB, distinct contents {distinct / 1e6:.2f} MB "
          f"(README.md aside)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
