#!/usr/bin/env python3
"""Make tests/models/tiny-sd: a tiny Stable-Diffusion-1.x-like pipeline in the
folder layout Hugging Face optimum's ONNX exporter writes, with random weights,
plus the latents and image a PyTorch implementation of the same pipeline
produces for fixed prompts and seeds: the oracle for `kiln generate`.

    tiny-sd/model_index.json
    tiny-sd/scheduler/scheduler_config.json      SD 1.5's schedule (scaled_linear, leading, offset 1)
    tiny-sd/tokenizer/{vocab.json,merges.txt,special_tokens_map.json,tokenizer_config.json}
    tiny-sd/text_encoder/{model.onnx,config.json}   input_ids [B, 77] -> last_hidden_state, pooler_output
    tiny-sd/unet/{model.onnx,model.onnx_data,config.json}  sample, timestep, encoder_hidden_states -> out_sample
    tiny-sd/vae_decoder/{model.onnx,config.json}    latent_sample [B, 4, h, w] -> sample [B, 3, 8h, 8w]
    tiny-sd/vae_encoder/{model.onnx,config.json}    sample -> latent_parameters (mean, logvar)
    tiny-sd/reference/<case>/case.json              the prompt, seed, steps, scheduler, size, guidance
    tiny-sd/reference/<case>/trajectory.npy         PyTorch's latents after each step [steps, 1, 4, h, w]
    tiny-sd/reference/<case>/pixels.npy             its image, H x W x RGB bytes
    tiny-sd/reference/<case>/init.png               image-to-image cases: the picture they start from
                                                    (vae_tiling: decoded in tiles, as diffusers' tiled_decode)

The networks are the reference models' code (tools/make_reference_models.py):
the same op patterns an SD 1.5 export has, at widths that keep the folder
small. The tokenizer is a small byte-level BPE in CLIP's file format
(tools/clip_bpe.py), the schedulers diffusers' formulas (tools/scheduler_ref.py)
and the noise kiln's generator (tools/kiln_rng.py).

Deterministic: running it twice writes identical files. Regenerate with
    /usr/bin/python3 tools/make_tiny_sd.py [--out tests/models/tiny-sd]
"""
import argparse
import functools
import json
import os
import shutil
import struct
import sys
import zlib

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clip_bpe  # noqa: E402
import kiln_rng  # noqa: E402
import scheduler_ref  # noqa: E402
from make_reference_models import (KILN_OPS, Downsample, ResnetBlock, TextEncoder, UNet, VaeDecoder,  # noqa: E402
                                   adjust_init, group_norm)

MAX_LENGTH = 77
CONTEXT_DIM = 32
LATENT_CHANNELS = 4
SCALING_FACTOR = 0.18215
SCHEDULER_CONFIG = {
    "_class_name": "EulerDiscreteScheduler",
    "_diffusers_version": "0.21.0",
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "num_train_timesteps": 1000,
    "prediction_type": "epsilon",
    "set_alpha_to_one": False,
    "steps_offset": 1,
    "timestep_spacing": "leading",
    "use_karras_sigmas": False,
}
# The cases the reference is made for: (name, prompt, negative prompt, seed,
# steps, guidance scale, scheduler, width, height).
CASES = [(f"a_cat_{s}", "a cat", "", 1, 4, 7.5, s, 64, 64)
         for s in ("ddim", "euler", "euler_a", "dpmpp_2m", "dpmpp_2m_karras")]
CASES += [("negative_prompt", "a red circle on a blue background", "green", 7, 6, 5.0, "euler_a", 64, 48),
          ("batch_steps_20", "two green squares", "", 3, 20, 7.5, "euler", 64, 64)]
# The few-step models' ways, 64 x 64: (name, prompt, seed, steps, guidance,
# scheduler, timestep spacing). Guidance off (scale <= 1: one UNet pass a
# step on the prompt alone); the Turbo ones start at t = 999 (trailing); LCM
# unguided and with the low guidance LCM-LoRA users give it.
FEW_STEP_CASES = [("unguided_euler", "a cat", 10, 4, 1.0, "euler", None),
                  ("turbo_1_step", "a cat", 11, 1, 0.0, "euler_a", "trailing"),
                  ("turbo_4_steps", "a red circle", 12, 4, 0.0, "euler_a", "trailing"),
                  ("lcm_4_steps", "a cat", 13, 4, 1.0, "lcm", None),
                  ("lcm_guided", "a red circle", 14, 4, 1.5, "lcm", None)]
# Image to image from reference/<name>/init.png: (name, prompt, seed, steps,
# strength, scheduler); the picture is init_picture()'s, 64 x 48.
IMG2IMG_CASES = [("img2img_dpmpp_2m", "a red circle", 5, 10, 0.6, "dpmpp_2m"),
                 ("img2img_euler_a", "a blue square", 6, 8, 0.5, "euler_a"),
                 ("img2img_ddim", "a cat", 8, 4, 0.75, "ddim")]


class VaeEncoder(nn.Module):
    """SD-style encoder, a 2x downsample per entry of `chans` (three here:
    8x): image [B, 3, H, W] -> the latent distribution's mean and log-variance
    [B, 2 latent_ch, H/8, W/8]. tools/train_default_model.py uses it too."""

    def __init__(self, chans=(32, 64, 64), latent_ch=LATENT_CHANNELS):
        super().__init__()
        c = chans[0]
        self.conv_in = nn.Conv2d(3, c, 3, padding=1)
        blocks = []
        for cout in chans:
            blocks += [ResnetBlock(c, cout), Downsample(cout)]
            c = cout
        self.down = nn.Sequential(*blocks)
        self.norm_out, self.conv_out = group_norm(c, eps=1e-6), nn.Conv2d(c, 2 * latent_ch, 3, padding=1)

    def forward(self, sample):
        return self.conv_out(F.silu(self.norm_out(self.down(self.conv_in(sample)))))


def networks(vocab_size):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    text = TextEncoder(vocab=vocab_size, dim=CONTEXT_DIM, heads=2, layers=2, max_len=MAX_LENGTH)
    with torch.no_grad():
        text.tok.weight.mul_(0.02)
        text.pos.weight.mul_(0.01)
    unet = UNet(in_ch=LATENT_CHANNELS, chans=(16, 32), heads=2, context_dim=CONTEXT_DIM)
    # Three 2x upsamples: 8x, SD's VAE factor.
    decoder = VaeDecoder(latent_ch=LATENT_CHANNELS, chans=(64, 32, 32), resnets_per_block=1)
    encoder = VaeEncoder()
    for m in (text, unet, decoder, encoder):
        adjust_init(m, gen)
        m.eval()
    with torch.no_grad():  # a noise prediction of about unit scale, as a trained UNet's
        unet.conv_out.weight.mul_(4.0)
    return text, unet, decoder, encoder


def export(model, args, path, input_names, output_names, axes, external_data=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=input_names, output_names=output_names, dynamic_axes=axes)
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    unsupported = sorted({n.op_type for n in m.graph.node} - KILN_OPS)
    assert not unsupported, f"{path}: ops kiln does not support: {unsupported}"
    if external_data:  # as optimum writes large models: weights in model.onnx_data
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx_data", size_threshold=1024)
    print(f"   {os.path.relpath(path)}: {len(m.graph.node)} nodes")


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_pipeline(out, text, unet, decoder, encoder, vocab_size):
    write_json(os.path.join(out, "model_index.json"), {
        "_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.21.0",
        "scheduler": ["diffusers", SCHEDULER_CONFIG["_class_name"]],
        "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"], "vae_decoder": ["diffusers", "AutoencoderKL"],
        "vae_encoder": ["diffusers", "AutoencoderKL"], "requires_safety_checker": False})
    write_json(os.path.join(out, "scheduler", "scheduler_config.json"), SCHEDULER_CONFIG)
    write_json(os.path.join(out, "text_encoder", "config.json"), {
        "architectures": ["CLIPTextModel"], "hidden_size": CONTEXT_DIM, "max_position_embeddings": MAX_LENGTH,
        "num_attention_heads": 2, "num_hidden_layers": 2, "vocab_size": vocab_size, "hidden_act": "quick_gelu"})
    write_json(os.path.join(out, "unet", "config.json"), {
        "_class_name": "UNet2DConditionModel", "in_channels": LATENT_CHANNELS, "out_channels": LATENT_CHANNELS,
        "sample_size": 8, "block_out_channels": [16, 32], "cross_attention_dim": CONTEXT_DIM})
    vae = {"_class_name": "AutoencoderKL", "in_channels": 3, "out_channels": 3, "latent_channels": LATENT_CHANNELS,
           "block_out_channels": [32, 32, 64, 64], "scaling_factor": SCALING_FACTOR, "sample_size": 64}
    write_json(os.path.join(out, "vae_decoder", "config.json"), vae)
    write_json(os.path.join(out, "vae_encoder", "config.json"), vae)

    ids = torch.zeros(2, MAX_LENGTH, dtype=torch.int64)
    export(text, (ids,), os.path.join(out, "text_encoder", "model.onnx"), ["input_ids"],
           ["last_hidden_state", "pooler_output"], {"input_ids": {0: "batch", 1: "sequence"},
                                                    "last_hidden_state": {0: "batch", 1: "sequence"},
                                                    "pooler_output": {0: "batch"}})
    export(unet, (torch.zeros(2, LATENT_CHANNELS, 8, 8), torch.tensor([981.0, 981.0]),
                  torch.zeros(2, MAX_LENGTH, CONTEXT_DIM)),
           os.path.join(out, "unet", "model.onnx"), ["sample", "timestep", "encoder_hidden_states"], ["out_sample"],
           {"sample": {0: "batch", 2: "height", 3: "width"}, "timestep": {0: "batch"},
            "encoder_hidden_states": {0: "batch", 1: "sequence"}, "out_sample": {0: "batch", 2: "height", 3: "width"}},
           external_data=True)
    export(decoder, (torch.zeros(1, LATENT_CHANNELS, 8, 8),), os.path.join(out, "vae_decoder", "model.onnx"),
           ["latent_sample"], ["sample"], {"latent_sample": {0: "batch", 2: "height", 3: "width"},
                                           "sample": {0: "batch", 2: "image_height", 3: "image_width"}})
    export(encoder, (torch.zeros(1, 3, 64, 64),), os.path.join(out, "vae_encoder", "model.onnx"), ["sample"],
           ["latent_parameters"], {"sample": {0: "batch", 2: "height", 3: "width"},
                                   "latent_parameters": {0: "batch", 2: "latent_height", 3: "latent_width"}})


def init_picture(width=64, height=48):
    """A red disc on a blue-to-green gradient, bytes [height, width, 3]."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.zeros((height, width, 3), np.uint8)
    rgb[..., 1] = (255 * x / (width - 1)).astype(np.uint8)
    rgb[..., 2] = 200
    disc = (x - width * 0.4) ** 2 + (y - height * 0.5) ** 2 < (height * 0.3) ** 2
    rgb[disc] = (220, 30, 30)
    return rgb


def write_png(path, rgb):
    """8-bit RGB PNG, no filter, for kiln's reader to read back."""
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(height))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def blend(a, b, extent, dim):
    """diffusers' blend_v (dim 2) and blend_h (dim 3): b's first rows or
    columns fade in over a's last ones; b is changed in place."""
    extent = min(a.shape[dim], b.shape[dim], extent)
    for k in range(extent):
        bk, ak = b.narrow(dim, k, 1), a.narrow(dim, a.shape[dim] - extent + k, 1)
        bk.copy_(ak * (1 - k / extent) + bk * (k / extent))
    return b


def tiled_decode(decoder, z, tile=64, factor=8, overlap=0.25):
    """diffusers' AutoencoderKL.tiled_decode: latent tiles of tile / factor,
    `overlap` of them shared, each decoded tile blended into its upper and
    left neighbours (already blended) and cropped to the stride."""
    tile_latent = tile // factor
    stride, extent = int(tile_latent * (1 - overlap)), int(tile * overlap)
    limit = tile - extent
    rows = [[decoder(z[:, :, i:i + tile_latent, j:j + tile_latent]) for j in range(0, z.shape[3], stride)]
            for i in range(0, z.shape[2], stride)]
    result_rows = []
    for i, row in enumerate(rows):
        result_row = []
        for j, t in enumerate(row):
            if i > 0:
                t = blend(rows[i - 1][j], t, extent, 2)
            if j > 0:
                t = blend(row[j - 1], t, extent, 3)
            result_row.append(t[:, :, :limit, :limit])
        result_rows.append(torch.cat(result_row, dim=3))
    return torch.cat(result_rows, dim=2)


TINY_SD = {"max_length": MAX_LENGTH, "factor": 8, "scaling_factor": SCALING_FACTOR, "scheduler": SCHEDULER_CONFIG}


def generate(tokenizer, text, unet, decoder, encoder, prompt, negative, seed, steps, guidance, scheduler, width,
             height, init=None, strength=None, spec=TINY_SD, spacing=None, conditions=None):
    """The pipeline kiln implements, in PyTorch float32: CFG with a batched
    uncond/cond pass (for a guidance scale over 1; otherwise one pass on the
    prompt alone, as diffusers), the scheduler's update (its timestep spacing
    `spacing` when given), the VAE decode. With `init`
    (bytes [H, W, 3]), image to image: the encoder's latent drawn with the
    seed's first draws, noised with the next ones to the level of the step
    that `strength` picks, as diffusers' img2img pipeline starts. `spec`
    holds what differs between pipelines: the tokenizer's length, the VAE's
    factor and scaling, the scheduler config. `conditions(texts, width,
    height)`, when given, makes the UNet's conditioning (a tuple of tensors,
    a row a text; SDXL's context, pooled text and time ids) in place of
    `text` over `tokenizer`'s ids."""
    kind, karras = (scheduler[:-len("_karras")], True) if scheduler.endswith("_karras") else (scheduler, False)
    config = dict(spec["scheduler"], use_karras_sigmas=karras)
    if spacing:
        config.update(timestep_spacing=spacing)
    sched = scheduler_ref.make(kind, config)
    sched.set_timesteps(steps)
    max_length, factor, scaling = spec["max_length"], spec["factor"], spec["scaling_factor"]
    guided = guidance > 1
    texts = [negative, prompt] if guided else [prompt]
    if conditions:
        conditioning = conditions(texts, width, height)
    else:
        ids = torch.tensor([tokenizer(t, max_length) for t in texts], dtype=torch.int64)
        with torch.no_grad():
            conditioning = (text(ids)[0],)
    shape = (1, LATENT_CHANNELS, height // factor, width // factor)
    count = int(np.prod(shape))
    pairs = (count + 1) // 2
    first_step = 0
    if init is None:
        latents = torch.from_numpy(kiln_rng.normals(seed, 0, count).reshape(shape)) * float(sched.init_noise_sigma)
        next_pair = pairs
    else:
        image = torch.from_numpy(init).permute(2, 0, 1)[None].float() / 255.0 * 2.0 - 1.0
        with torch.no_grad():
            mean, logvar = encoder(image).chunk(2, dim=1)
        eps = torch.from_numpy(kiln_rng.normals(seed, 0, count).reshape(shape))
        x0 = (mean + torch.exp(0.5 * logvar.clamp(-30.0, 20.0)) * eps) * scaling
        first_step = max(steps - min(int(steps * strength), steps), 0)
        start_noise = kiln_rng.normals(seed, pairs, count).reshape(shape)
        latents = torch.from_numpy(np.asarray(sched.add_noise(x0.numpy(), start_noise, first_step), np.float32))
        next_pair = 2 * pairs
    trajectory = []
    for i in range(first_step, len(sched.timesteps)):
        t = sched.timesteps[i]
        model_in = (torch.cat([latents, latents]) if guided else latents) * float(sched.input_scale(i))
        with torch.no_grad():
            out = unet(model_in, torch.full((model_in.shape[0],), float(t)), *conditioning)
        if guided:
            uncond, cond = out.chunk(2)
            out = uncond + guidance * (cond - uncond)
        noise = None
        if sched.needs_noise:
            noise = kiln_rng.normals(seed, next_pair, count).reshape(shape)
            next_pair += pairs
        latents = torch.from_numpy(np.asarray(sched.step(out.numpy(), i, latents.numpy(), noise),
                                              dtype=np.float32))
        trajectory.append(latents.numpy().copy())
    with torch.no_grad():
        image = decoder(latents / scaling)
    pixels = ((image[0] / 2 + 0.5).clamp(0, 1).permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    return np.stack(trajectory), image.numpy(), pixels


def write_reference_case(folder, trajectory, pixels, case):
    """One reference case as kiln's tests read it: case.json, the latents
    after each step (trajectory.npy) and the image's bytes (pixels.npy)."""
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "trajectory.npy"), trajectory.astype(np.float32))
    np.save(os.path.join(folder, "pixels.npy"), pixels)
    write_json(os.path.join(folder, "case.json"), case)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/models/tiny-sd", help="output folder (default: tests/models/tiny-sd)")
    args = parser.parse_args()
    out = args.out
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    clip_bpe.write_tokenizer_dir(os.path.join(out, "tokenizer"))
    tokenizer = clip_bpe.ClipTokenizer(os.path.join(out, "tokenizer"))
    vocab_size = len(tokenizer.encoder)
    text, unet, decoder, encoder = networks(vocab_size)
    print(f"== tiny-sd: vocab {vocab_size}")
    write_pipeline(out, text, unet, decoder, encoder, vocab_size)
    cases = [(*c, None, None, False, None) for c in CASES]
    cases += [(name, prompt, "", seed, steps, guidance, scheduler, 64, 64, None, None, False, spacing)
              for name, prompt, seed, steps, guidance, scheduler, spacing in FEW_STEP_CASES]
    cases += [(name, prompt, "", seed, steps, 7.5, scheduler, 64, 48, init_picture(), strength, False, None)
              for name, prompt, seed, steps, strength, scheduler in IMG2IMG_CASES]
    # Twice the VAE's 64-pixel tile and more: kiln decodes it in tiles by default.
    cases.append(("vae_tiling", "a cat", "", 9, 4, 7.5, "euler", 144, 96, None, None, True, None))
    for name, prompt, negative, seed, steps, guidance, scheduler, width, height, init, strength, tiled, spacing in cases:
        decode = functools.partial(tiled_decode, decoder) if tiled else decoder
        trajectory, _, pixels = generate(tokenizer, text, unet, decode, encoder, prompt, negative, seed, steps,
                                         guidance, scheduler, width, height, init, strength, spacing=spacing)
        folder = os.path.join(out, "reference", name)
        case = {"prompt": prompt, "negative_prompt": negative, "seed": seed, "steps": steps,
                "guidance_scale": guidance, "scheduler": scheduler, "width": width, "height": height}
        if init is not None:
            os.makedirs(folder, exist_ok=True)
            write_png(os.path.join(folder, "init.png"), init)
            case.update(init_image="init.png", strength=strength)
        if tiled:
            case.update(vae_tiling=True)
        if spacing:
            case.update(timestep_spacing=spacing)
        write_reference_case(folder, trajectory, pixels, case)
        print(f"   {name}: final latent max|x| {np.abs(trajectory[-1]).max():.3f}, "
              f"image mean {pixels.mean():.1f} std {pixels.std():.1f}")


if __name__ == "__main__":
    main()
