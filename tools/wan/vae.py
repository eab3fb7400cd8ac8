#!/usr/bin/env python3
"""The Wan2.2 VAE (TI2V-5B: 48 latent channels, 16x16 spatial and 4x temporal
compression, a 2x2 pixel patchify built in) in plain PyTorch: the oracle kiln's
C++ VAE is checked against. Spec: shared/reference/wan22-ti2v-5b.md §3; the
facts were read from Wan2.2 `wan/modules/vae2_2.py` and diffusers
`autoencoder_kl_wan.py` (the is_residual paths) and `convert_wan_to_diffusers.py`
(convert_vae_22).

    from wan.vae import WanVAE, to_original_names, LATENTS_MEAN, LATENTS_STD
    vae = WanVAE(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=(1, 2, 4, 4),
                 num_res_blocks=2, temperal_downsample=(False, True, True), patch_size=2,
                 latents_mean=LATENTS_MEAN, latents_std=LATENTS_STD)
    vae.state_dict()                 # diffusers AutoencoderKLWan names
    to_original_names(sd)            # the same tensors under vae2_2.py's names
    z = vae.encode(video)            # [B,3,1+4k,H,W] in [-1,1] -> normalised mu [B,48,1+k,H/16,W/16]
    video = vae.decode(z)            # [B,48,F,h,w] -> [B,3,1+4(F-1),16h,16w], clamped to [-1,1]
    decode_chunk_caches(vae, z)      # every causal conv's cache, per decode call

Causal execution. Both directions run the clip in chunks, as Wan does: encode
feeds pixel frame 0 alone, then 4 frames per call; decode feeds one latent
frame per call. Every CausalConv3d with a temporal kernel of 3 pads 2 frames in
front: zeros on the first call, afterwards its cache, the last 2 frames of its
input so far. Wan keeps 1 frame where a call gave only 1 frame and no earlier
call existed, and pads the missing one with zeros; this file keeps 2 frames
from the start with that zero frame written in, which gives identical outputs
and one cache shape per conv for every call after the first.

First-call rules (decode chunk 0 / encode chunk 0):
  - upsample3d's time_conv is skipped (1 frame stays 1 frame); its cache starts
    as 2 zero frames, which is what Wan's "Rep" marker amounts to on call 1;
  - downsample3d's time_conv is skipped; its cache is the last frame of the
    (spatially downsampled) input, and later calls convolve [cache ‖ chunk]
    with kernel 3, stride 2 and no padding;
  - DupUp3D drops its first factor_t-1 output frames; AvgDown3D always pads
    the chunk in front to a multiple of factor_t (it has no cache).

Run this file to check the tiny configuration (shapes, causality, chunking):
    /usr/bin/python3 tools/wan/vae.py [--full-count]
"""
import math
import re
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# vae2_2.py Wan2_2_VAE; the same 48 values are diffusers' vae/config.json latents_mean / latents_std.
LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
)
LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
)

CACHE_T = 2  # frames a causal conv remembers between calls
ENCODE_CHUNK = 4  # pixel frames per encoder call after frame 0


class CausalState:
    """What the causal convs carry from one call to the next within one clip.

    cache maps a conv module to its cached input frames [B,C,CACHE_T,H,W]
    (downsample3d's time_conv: [B,C,1,H,W]). first_chunk is true during the
    first call. trace, when a list, receives (conv, cache shape fed in or None,
    cache shape written) for every cached conv, in call order."""

    def __init__(self):
        self.cache = {}
        self.first_chunk = True
        self.trace = None

    def note(self, conv, cache_in, cache_out):
        if self.trace is not None:
            self.trace.append((conv, None if cache_in is None else tuple(cache_in.shape),
                               tuple(cache_out.shape)))


class CausalConv3d(nn.Conv3d):
    """Conv3d whose temporal padding is 2*pt frames in front only (zeros, or the
    cached frames of the previous call); spatial padding is symmetric."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=0)
        pt, ph, pw = padding if isinstance(padding, tuple) else (padding,) * 3
        self.front = 2 * pt
        self.pad_hw = (pw, pw, ph, ph)

    def forward(self, x, state=None):
        front = self.front
        if front and state is not None:
            prev = state.cache.get(self)
            if prev is None:
                # Wan stores fewer than CACHE_T frames here; a zero frame in front is the same padding.
                keep = F.pad(x[:, :, -CACHE_T:], (0, 0, 0, 0, max(0, CACHE_T - x.shape[2]), 0))
            else:
                keep = torch.cat([prev, x[:, :, -CACHE_T:]], 2)[:, :, -CACHE_T:]
                x = torch.cat([prev, x], 2)
                front -= prev.shape[2]
            state.note(self, prev, keep)
            state.cache[self] = keep
        return super().forward(F.pad(x, self.pad_hw + (front, 0)))


class RMSNorm(nn.Module):
    """L2-normalise over channels (dim 1, eps 1e-12), times sqrt(C) and gamma; no bias.
    gamma is [C,1,1,1] for 5-D inputs (images=False in Wan), [C,1,1] for per-frame 4-D ones."""

    def __init__(self, dim, images=False):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones((dim, 1, 1) if images else (dim, 1, 1, 1)))
        self.scale = dim ** 0.5

    def forward(self, x):
        return F.normalize(x, dim=1) * self.scale * self.gamma


def frames_to_batch(x):
    """[B,C,T,H,W] -> [B*T,C,H,W] (frame-major), for per-frame 2-D ops."""
    b, c, t, h, w = x.shape
    return x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)


def batch_to_frames(x, b):
    bt, c, h, w = x.shape
    return x.reshape(b, bt // b, c, h, w).permute(0, 2, 1, 3, 4)


class ResidualBlock(nn.Module):
    """RMS -> SiLU -> CConv3d(in->out) -> RMS -> SiLU -> CConv3d(out->out), plus the
    shortcut (a 1x1x1 conv when the width changes). Dropout is 0 in every Wan config."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.norm1 = RMSNorm(in_dim)
        self.conv1 = CausalConv3d(in_dim, out_dim, 3, padding=1)
        self.norm2 = RMSNorm(out_dim)
        self.conv2 = CausalConv3d(out_dim, out_dim, 3, padding=1)
        self.conv_shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else None

    def forward(self, x, state):
        h = x if self.conv_shortcut is None else self.conv_shortcut(x)
        x = self.conv1(F.silu(self.norm1(x)), state)
        x = self.conv2(F.silu(self.norm2(x)), state)
        return x + h


class AttentionBlock(nn.Module):
    """Single-head self-attention over the H*W positions of each frame separately:
    RMS norm, 1x1 conv to q|k|v (channel thirds), softmax(q k^T / sqrt(C)) v, 1x1 proj, residual."""

    def __init__(self, dim):
        super().__init__()
        self.norm = RMSNorm(dim, images=True)
        self.to_qkv = nn.Conv2d(dim, dim * 3, 1)
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x):
        b, c, t, h, w = x.shape
        y = self.norm(frames_to_batch(x))
        q, k, v = self.to_qkv(y).reshape(b * t, 3 * c, h * w).chunk(3, dim=1)  # each [BT, C, HW]
        weights = torch.softmax(q.transpose(1, 2) @ k / math.sqrt(c), dim=-1)  # [BT, HW(query), HW(key)]
        y = (v @ weights.transpose(1, 2)).reshape(b * t, c, h, w)
        return x + batch_to_frames(self.proj(y), b)


class MidBlock(nn.Module):
    """ResidualBlock, AttentionBlock, ResidualBlock (Wan's `middle.0/1/2`)."""

    def __init__(self, dim):
        super().__init__()
        self.resnets = nn.ModuleList([ResidualBlock(dim, dim), ResidualBlock(dim, dim)])
        self.attentions = nn.ModuleList([AttentionBlock(dim)])

    def forward(self, x, state):
        x = self.resnets[0](x, state)
        x = self.attentions[0](x)
        return self.resnets[1](x, state)


class Resample(nn.Module):
    """Spatial x2 down/up sampling per frame, with an optional temporal x2 time_conv.

    downsample: ZeroPad(right 1, bottom 1) + Conv2d 3x3 stride 2; the 3-D form then
      applies time_conv (C->C, kernel (3,1,1), stride 2, no padding) to [last cached frame ‖ chunk].
    upsample: the 3-D form first applies time_conv (C->2C, kernel (3,1,1), causal) and
      interleaves the two channel halves as frames 2t, 2t+1; then nearest x2 + Conv2d 3x3 (C->C)."""

    def __init__(self, dim, mode):
        super().__init__()
        assert mode in ("downsample2d", "downsample3d", "upsample2d", "upsample3d"), mode
        self.mode = mode
        if mode.startswith("downsample"):
            self.resample = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(dim, dim, 3, stride=2))
        else:
            self.resample = nn.Sequential(nn.Upsample(scale_factor=2.0, mode="nearest"),
                                          nn.Conv2d(dim, dim, 3, padding=1))
        self.time_conv = None
        if mode == "downsample3d":
            self.time_conv = CausalConv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1))
        elif mode == "upsample3d":
            self.time_conv = CausalConv3d(dim, dim * 2, (3, 1, 1), padding=(1, 0, 0))

    def forward(self, x, state):
        b, c, t, h, w = x.shape
        if self.mode == "upsample3d":
            if self.time_conv not in state.cache:
                # First call: no temporal upsampling; the next call pads with zeros (Wan's "Rep").
                state.cache[self.time_conv] = x.new_zeros(b, c, CACHE_T, h, w)
            else:
                x = self.time_conv(x, state).reshape(b, 2, c, t, h, w)
                x = x.permute(0, 2, 3, 1, 4, 5).reshape(b, c, 2 * t, h, w)
        x = batch_to_frames(self.resample(frames_to_batch(x)), b)
        if self.mode == "downsample3d":
            prev = state.cache.get(self.time_conv)
            keep = x[:, :, -1:]
            state.note(self.time_conv, prev, keep)
            state.cache[self.time_conv] = keep
            if prev is not None:
                x = self.time_conv(torch.cat([prev, x], 2))
        return x


def space_time_to_channels(x, factor_t, factor_s):
    """[B,C,T,H,W] -> [B, C*ft*fs*fs, T/ft, H/fs, W/fs]; channel c*ft*fs*fs + it*fs*fs + ih*fs + iw."""
    b, c, t, h, w = x.shape
    x = x.reshape(b, c, t // factor_t, factor_t, h // factor_s, factor_s, w // factor_s, factor_s)
    x = x.permute(0, 1, 3, 5, 7, 2, 4, 6)
    return x.reshape(b, c * factor_t * factor_s * factor_s, t // factor_t, h // factor_s, w // factor_s)


def channels_to_space_time(x, factor_t, factor_s):
    """The inverse of space_time_to_channels."""
    b, c, t, h, w = x.shape
    c_out = c // (factor_t * factor_s * factor_s)
    x = x.reshape(b, c_out, factor_t, factor_s, factor_s, t, h, w)
    x = x.permute(0, 1, 5, 2, 6, 3, 7, 4)
    return x.reshape(b, c_out, t * factor_t, h * factor_s, w * factor_s)


def avg_down_3d(x, out_channels, factor_t, factor_s):
    """Wan2.2's parameter-free down-block shortcut (AvgDown3D): pad time in front to a
    multiple of factor_t, move (ft, fs, fs) into channels, average consecutive groups."""
    x = F.pad(x, (0, 0, 0, 0, (-x.shape[2]) % factor_t, 0))
    x = space_time_to_channels(x, factor_t, factor_s)
    b, c, t, h, w = x.shape
    return x.reshape(b, out_channels, c // out_channels, t, h, w).mean(dim=2)


def dup_up_3d(x, out_channels, factor_t, factor_s, first_chunk):
    """Wan2.2's parameter-free up-block shortcut (DupUp3D): repeat each channel, move the
    copies into (ft, fs, fs); the first call drops the first factor_t-1 frames."""
    repeats = out_channels * factor_t * factor_s * factor_s // x.shape[1]
    x = channels_to_space_time(x.repeat_interleave(repeats, dim=1), factor_t, factor_s)
    return x[:, :, factor_t - 1:] if first_chunk else x


class ResidualDownBlock(nn.Module):
    """num_res_blocks ResidualBlocks, an optional downsampler, plus the AvgDown3D shortcut."""

    def __init__(self, in_dim, out_dim, num_res_blocks, temporal, spatial):
        super().__init__()
        self.out_dim = out_dim
        self.factor_t = 2 if temporal else 1
        self.factor_s = 2 if spatial else 1
        self.resnets = nn.ModuleList(
            [ResidualBlock(in_dim if i == 0 else out_dim, out_dim) for i in range(num_res_blocks)])
        self.downsampler = Resample(out_dim, "downsample3d" if temporal else "downsample2d") if spatial else None

    def forward(self, x, state):
        shortcut = avg_down_3d(x, self.out_dim, self.factor_t, self.factor_s)
        for resnet in self.resnets:
            x = resnet(x, state)
        if self.downsampler is not None:
            x = self.downsampler(x, state)
        return x + shortcut


class ResidualUpBlock(nn.Module):
    """num_res_blocks+1 ResidualBlocks and an optional upsampler, plus the DupUp3D shortcut
    when the block upsamples (the last block has neither)."""

    def __init__(self, in_dim, out_dim, num_resnets, temporal, spatial):
        super().__init__()
        self.out_dim = out_dim
        self.spatial = spatial
        self.factor_t = 2 if temporal else 1
        self.resnets = nn.ModuleList(
            [ResidualBlock(in_dim if i == 0 else out_dim, out_dim) for i in range(num_resnets)])
        self.upsampler = Resample(out_dim, "upsample3d" if temporal else "upsample2d") if spatial else None

    def forward(self, x, state):
        shortcut = dup_up_3d(x, self.out_dim, self.factor_t, 2, state.first_chunk) if self.spatial else 0
        for resnet in self.resnets:
            x = resnet(x, state)
        if self.upsampler is not None:
            x = self.upsampler(x, state)
        return x + shortcut


class Encoder(nn.Module):
    """conv_in, down blocks of widths base*[1]+dim_mult (spatial x2 down in all but the
    last, temporal where temperal_downsample says), mid block, RMS -> SiLU -> conv_out."""

    def __init__(self, in_channels, base_dim, out_channels, dim_mult, num_res_blocks, temperal_downsample):
        super().__init__()
        dims = [base_dim * m for m in (1,) + tuple(dim_mult)]
        last = len(dim_mult) - 1
        self.conv_in = CausalConv3d(in_channels, dims[0], 3, padding=1)
        self.down_blocks = nn.ModuleList([
            ResidualDownBlock(dims[i], dims[i + 1], num_res_blocks,
                              temporal=i != last and temperal_downsample[i], spatial=i != last)
            for i in range(len(dim_mult))])
        self.mid_block = MidBlock(dims[-1])
        self.norm_out = RMSNorm(dims[-1])
        self.conv_out = CausalConv3d(dims[-1], out_channels, 3, padding=1)

    def forward(self, x, state):
        x = self.conv_in(x, state)
        for block in self.down_blocks:
            x = block(x, state)
        x = self.mid_block(x, state)
        return self.conv_out(F.silu(self.norm_out(x)), state)


class Decoder(nn.Module):
    """conv_in, mid block, up blocks of widths base*[m_last]+reversed(dim_mult) with
    num_res_blocks+1 ResidualBlocks each (spatial x2 up in all but the last, temporal where
    temperal_upsample says), RMS -> SiLU -> conv_out."""

    def __init__(self, z_dim, base_dim, out_channels, dim_mult, num_res_blocks, temperal_upsample):
        super().__init__()
        dims = [base_dim * m for m in (dim_mult[-1],) + tuple(dim_mult[::-1])]
        last = len(dim_mult) - 1
        self.conv_in = CausalConv3d(z_dim, dims[0], 3, padding=1)
        self.mid_block = MidBlock(dims[0])
        self.up_blocks = nn.ModuleList([
            ResidualUpBlock(dims[i], dims[i + 1], num_res_blocks + 1,
                            temporal=i != last and temperal_upsample[i], spatial=i != last)
            for i in range(len(dim_mult))])
        self.norm_out = RMSNorm(dims[-1])
        self.conv_out = CausalConv3d(dims[-1], out_channels, 3, padding=1)

    def forward(self, x, state):
        x = self.conv_in(x, state)
        x = self.mid_block(x, state)
        for block in self.up_blocks:
            x = block(x, state)
        return self.conv_out(F.silu(self.norm_out(x)), state)


def patchify(x, p):
    """[B,C,T,p*h,p*w] -> [B,C*p*p,T,h,w]; channel c*p*p + r*p + q, r the column (w) offset, q the row (h) offset."""
    b, c, t, hh, ww = x.shape
    x = x.reshape(b, c, t, hh // p, p, ww // p, p)  # b c t h q w r
    return x.permute(0, 1, 6, 4, 2, 3, 5).reshape(b, c * p * p, t, hh // p, ww // p)


def unpatchify(x, p):
    """The inverse of patchify."""
    b, cpp, t, h, w = x.shape
    x = x.reshape(b, cpp // (p * p), p, p, t, h, w)  # b c r q t h w
    return x.permute(0, 1, 4, 5, 3, 6, 2).reshape(b, cpp // (p * p), t, h * p, w * p)


class WanVAE(nn.Module):
    """AutoencoderKLWan with is_residual=True (the Wan2.2 VAE); parameter names are diffusers'.

    encode / decode take and return normalised latents ((mu - mean) / std), as the
    pipelines hand them to and take them from the transformer."""

    def __init__(self, base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=(1, 2, 4, 4), num_res_blocks=2,
                 temperal_downsample=(False, True, True), patch_size=2, latents_mean=LATENTS_MEAN,
                 latents_std=LATENTS_STD):
        super().__init__()
        if len(latents_mean) != z_dim or len(latents_std) != z_dim:
            raise ValueError(f"WanVAE: latents_mean/std need {z_dim} values, got "
                             f"{len(latents_mean)}/{len(latents_std)}")
        self.z_dim = z_dim
        self.patch_size = patch_size or 1
        self.temporal_factor = 2 ** sum(bool(t) for t in temperal_downsample[:len(dim_mult) - 1])
        self.spatial_factor = self.patch_size * 2 ** (len(dim_mult) - 1)
        pixel_channels = 3 * self.patch_size ** 2
        self.encoder = Encoder(pixel_channels, base_dim, 2 * z_dim, dim_mult, num_res_blocks,
                               tuple(temperal_downsample))
        self.quant_conv = CausalConv3d(2 * z_dim, 2 * z_dim, 1)
        self.post_quant_conv = CausalConv3d(z_dim, z_dim, 1)
        self.decoder = Decoder(z_dim, decoder_base_dim, pixel_channels, dim_mult, num_res_blocks,
                               tuple(temperal_downsample)[::-1])
        self.register_buffer("latents_mean", torch.tensor(latents_mean).view(1, z_dim, 1, 1, 1), persistent=False)
        # Wan scales by 1/std and decodes by dividing by it; kept that way so float32 rounding matches.
        self.register_buffer("latents_inv_std", 1.0 / torch.tensor(latents_std).view(1, z_dim, 1, 1, 1),
                             persistent=False)

    @torch.no_grad()
    def encode(self, video, state=None):
        """video [B,3,1+4k,H,W] in [-1,1] -> normalised latent mean [B,z,1+k,H/16,W/16]."""
        b, c, t, h, w = video.shape
        if c != 3 or (t - 1) % self.temporal_factor or h % self.spatial_factor or w % self.spatial_factor:
            raise ValueError(f"WanVAE.encode: video {list(video.shape)} is not [B,3,1+{self.temporal_factor}k,"
                             f"{self.spatial_factor}m,{self.spatial_factor}n]")
        x = patchify(video, self.patch_size)
        return self._encode_chunks(x, [(0, 1)] + [(s, s + ENCODE_CHUNK) for s in range(1, t, ENCODE_CHUNK)], state)

    def _encode_chunks(self, x, chunks, state=None):
        state = state or CausalState()
        outs = []
        for i, (start, end) in enumerate(chunks):
            state.first_chunk = i == 0
            if state.trace is not None:
                state.trace.append(("chunk", i))
            outs.append(self.encoder(x[:, :, start:end], state))
        mu = self.quant_conv(torch.cat(outs, 2))[:, :self.z_dim]  # the log-variance half is unused
        return (mu - self.latents_mean) * self.latents_inv_std

    @torch.no_grad()
    def decode(self, z, state=None):
        """normalised z [B,z,F,h,w] -> video [B,3,1+4(F-1),16h,16w], clamped to [-1,1];
        one latent frame per decoder call."""
        if z.dim() != 5 or z.shape[1] != self.z_dim:
            raise ValueError(f"WanVAE.decode: latent {list(z.shape)} is not [B,{self.z_dim},F,h,w]")
        return self._decode_chunks(z, [(i, i + 1) for i in range(z.shape[2])], state)

    def _decode_chunks(self, z, chunks, state=None):
        state = state or CausalState()
        x = self.post_quant_conv(z / self.latents_inv_std + self.latents_mean)
        outs = []
        for i, (start, end) in enumerate(chunks):
            state.first_chunk = i == 0
            if state.trace is not None:
                state.trace.append(("chunk", i))
            outs.append(self.decoder(x[:, :, start:end], state))
        return unpatchify(torch.cat(outs, 2), self.patch_size).clamp(-1.0, 1.0)


def _chunk_caches(vae, run):
    state = CausalState()
    state.trace = []
    run(state)
    names = {m: n for n, m in vae.named_modules()}
    chunks = []
    for entry in state.trace:
        if entry[0] == "chunk":
            chunks.append([])
        else:
            conv, cache_in, cache_out = entry
            chunks[-1].append((names[conv], cache_in, cache_out))
    return chunks


def decode_chunk_caches(vae, z):
    """Runs vae.decode(z) and lists, for each decoder call (one per latent frame), every
    cached causal conv in the order it runs: (diffusers module name, shape of the cache it
    reads (None on call 0: zero padding), shape of the cache it leaves for the next call).

    Every cache is [B,C,2,H,W], the last 2 frames of that conv's input (after norm+SiLU for
    the residual convs, before the spatial upsample for time_conv). On call 0 the caches
    written are [zeros, frame]; upsample3d's time_conv does not run on call 0 and does not
    appear in call 0's list; its cache for call 1 is 2 zero frames. From call 1 on the list
    and its shapes are the same for every call; for latent h x w and the TI2V-5B decoder:
      conv_in [B,48,2,h,w]; mid_block and up_blocks.0 resnets [B,1024,2,h,w];
      up_blocks.0.upsampler.time_conv [B,1024,2,h,w];
      up_blocks.1 resnets [B,1024,2,2h,2w]; up_blocks.1.upsampler.time_conv [B,1024,2,2h,2w];
      up_blocks.2 resnets [B,1024|512,2,4h,4w]; up_blocks.3 resnets [B,512|256,2,8h,8w];
      conv_out [B,256,2,8h,8w]
    (6.43 GB in fp32 at 704x1280, h x w = 44 x 80). Frames per call: 1 everywhere on call 0;
    afterwards 1 up to up_blocks.0's time_conv, 2 in up_blocks.1, 4 from up_blocks.2 on."""
    return _chunk_caches(vae, lambda state: vae.decode(z, state))


def encode_chunk_caches(vae, video):
    """As decode_chunk_caches, for vae.encode(video): call 0 is pixel frame 0, then 4 frames per
    call. downsample3d's time_conv keeps 1 frame (its input after the spatial downsample)."""
    return _chunk_caches(vae, lambda state: vae.encode(video, state))


_RESNET_PARTS = {"norm1.gamma": "residual.0.gamma", "conv1": "residual.2", "norm2.gamma": "residual.3.gamma",
                 "conv2": "residual.6", "conv_shortcut": "shortcut"}


def _original_resnet(rest):
    for new, old in _RESNET_PARTS.items():
        if rest == new or rest.startswith(new + "."):
            return old + rest[len(new):]
    raise KeyError(rest)


def to_original_names(sd):
    """The same tensors under Wan2.2 vae2_2.py's names (the inverse of diffusers' convert_vae_22):
    encoder.conv_in -> encoder.conv1, encoder.down_blocks.i.resnets.j.norm1.gamma ->
    encoder.downsamples.i.downsamples.j.residual.0.gamma, ...downsampler.X ->
    ...downsamples.<num resnets>.X, mid_block.{resnets.0,attentions.0,resnets.1} -> middle.{0,1,2},
    norm_out.gamma / conv_out -> head.0.gamma / head.2, quant_conv -> conv1, post_quant_conv -> conv2."""
    resnet_count = {}
    for key in sd:
        m = re.match(r"(encoder\.down_blocks|decoder\.up_blocks)\.(\d+)\.resnets\.(\d+)\.", key)
        if m:
            block = (m.group(1), m.group(2))
            resnet_count[block] = max(resnet_count.get(block, 0), int(m.group(3)) + 1)
    out = {}
    for key, value in sd.items():
        out[_original_name(key, resnet_count)] = value
    return out


def _original_name(key, resnet_count):
    if key.startswith("quant_conv."):
        return "conv1." + key[len("quant_conv."):]
    if key.startswith("post_quant_conv."):
        return "conv2." + key[len("post_quant_conv."):]
    side, rest = key.split(".", 1)
    if side not in ("encoder", "decoder"):
        raise KeyError(f"to_original_names: unexpected key {key}")
    if rest.startswith("conv_in."):
        return f"{side}.conv1.{rest[len('conv_in.'):]}"
    if rest.startswith("norm_out."):
        return f"{side}.head.0.{rest[len('norm_out.'):]}"
    if rest.startswith("conv_out."):
        return f"{side}.head.2.{rest[len('conv_out.'):]}"
    m = re.match(r"mid_block\.(resnets|attentions)\.(\d+)\.(.+)", rest)
    if m:
        kind, idx, tail = m.group(1), int(m.group(2)), m.group(3)
        if kind == "attentions":
            return f"{side}.middle.{2 * idx + 1}.{tail}"
        return f"{side}.middle.{2 * idx}.{_original_resnet(tail)}"
    m = re.match(r"(down_blocks|up_blocks)\.(\d+)\.(resnets\.(\d+)|downsampler|upsampler)\.(.+)", rest)
    if m:
        blocks, i, tail = m.group(1), m.group(2), m.group(5)
        inner = "downsamples" if blocks == "down_blocks" else "upsamples"
        if m.group(4) is not None:
            return f"{side}.{inner}.{i}.{inner}.{m.group(4)}.{_original_resnet(tail)}"
        return f"{side}.{inner}.{i}.{inner}.{resnet_count[(side + '.' + blocks, i)]}.{tail}"
    raise KeyError(f"to_original_names: unexpected key {key}")


TINY_CONFIG = dict(base_dim=16, decoder_base_dim=16, z_dim=48, dim_mult=(1, 2, 4, 4), num_res_blocks=2,
                   temperal_downsample=(False, True, True), patch_size=2)


def _self_test(full_count):
    torch.manual_seed(0)
    vae = WanVAE(**TINY_CONFIG).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # gammas and biases away from their 1 / 0 init, so every path matters
        for name, p in vae.named_parameters():
            if name.endswith("gamma"):
                p.mul_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.add_(0.05 * torch.randn(p.shape, generator=gen))

    z = torch.randn(1, 48, 3, 4, 6, generator=gen)
    video = vae.decode(z)
    assert video.shape == (1, 3, 9, 64, 96), video.shape
    clip = torch.rand(1, 3, 9, 64, 96, generator=gen) * 2 - 1
    lat = vae.encode(clip)
    assert lat.shape == (1, 48, 3, 4, 6), lat.shape
    print(f"shapes: decode {list(z.shape)} -> {list(video.shape)}, encode {list(clip.shape)} -> {list(lat.shape)}")
    clamped = (video.abs() == 1).float().mean()
    print(f"decoded std {video.std():.3f} ({clamped:.2%} clamped), latent std {lat.std():.3f}")

    # Causality: 2 latent frames decode to the first 5 pixel frames of 3.
    d2 = vae.decode(z[:, :, :2])
    err = (d2 - video[:, :, :5]).abs().max().item()
    print(f"decode causality: max |decode(z[:2]) - decode(z)[:5]| = {err:.3g}")
    assert err == 0.0

    # Later calls see latent frame 0 only through the caches, and they do see it.
    z_other = z.clone()
    z_other[:, :, 0] += 1
    moved = (vae.decode(z_other) - video).abs().amax(dim=(0, 1, 3, 4))
    print(f"max change per pixel frame when latent frame 0 changes: {[round(v, 3) for v in moved.tolist()]}")
    assert moved[1:5].min() > 1e-2 and moved[5:].min() > 1e-2

    # The caches reproduce one contiguous causal pass: frame 0 alone, then all later frames in one call.
    x64 = vae.double()
    z5 = torch.randn(1, 48, 5, 4, 6, generator=gen, dtype=torch.float64)
    per_frame = x64.decode(z5)
    together = x64._decode_chunks(z5, [(0, 1), (1, 5)])
    err = (per_frame - together).abs().max().item()
    print(f"decode chunking (f64): per latent frame vs [0],[1..4] in one call: {err:.3g}")
    assert err < 1e-12

    clip64 = torch.rand(1, 3, 17, 64, 96, generator=gen, dtype=torch.float64) * 2 - 1
    chunked = x64.encode(clip64)
    xp = patchify(clip64, 2)
    together = x64._encode_chunks(xp, [(0, 1), (1, 17)])
    err = (chunked - together).abs().max().item()
    print(f"encode chunking (f64): chunks of 4 vs [0],[1..16] in one call: {err:.3g}")
    assert err < 1e-12

    one = x64.encode(clip64[:, :, :1])
    err = (one - chunked[:, :, :1]).abs().max().item()
    print(f"encode causality (f64): encode(frame 0) vs encode(17 frames)[:, :, :1]: {err:.3g}")
    assert err < 1e-12
    nine = x64.encode(clip64[:, :, :9])
    err = (nine - chunked[:, :, :3]).abs().max().item()
    print(f"encode causality (f64): encode(9 frames) vs encode(17 frames)[:, :, :3]: {err:.3g}")
    assert err < 1e-12

    # Patchify layout: channel c*4 + r*2 + q with r the column offset, q the row offset.
    img = torch.arange(3 * 4 * 4, dtype=torch.float64).view(1, 3, 1, 4, 4)
    p = patchify(img, 2)
    assert p[0, 1 * 4 + 1 * 2 + 0, 0, 1, 0] == img[0, 1, 0, 2, 1]  # c=1, r=1 (w), q=0 (h)
    assert torch.equal(unpatchify(p, 2), img)

    sd = vae.state_dict()
    orig = to_original_names(sd)
    assert len(orig) == len(sd)
    print(f"state dict: {len(sd)} tensors; original names distinct: {len(set(orig))}")

    print("decode caches, latent 4x6 (call: [conv, cache read, cache written]):")
    z1 = torch.randn(1, 48, 3, 4, 6, generator=gen, dtype=torch.float64)
    for i, chunk in enumerate(decode_chunk_caches(x64, z1)):
        print(f"  call {i}: {len(chunk)} cached convs")
        for name, cin, cout in chunk:
            print(f"    {name:50s} {str(list(cin)) if cin else 'zeros':22s} -> {list(cout)}")

    if full_count:
        full = WanVAE()
        enc = sum(p.numel() for n, p in full.named_parameters() if n.startswith(("encoder.", "quant_conv.")))
        dec = sum(p.numel() for n, p in full.named_parameters() if n.startswith(("decoder.", "post_quant_conv.")))
        total = sum(p.numel() for p in full.parameters())
        print(f"full config params: encoder+quant_conv {enc:,}, decoder+post_quant_conv {dec:,}, total {total:,}")
    print("vae self-test: 1 passed, 0 failed")


if __name__ == "__main__":
    _self_test("--full-count" in sys.argv[1:])
