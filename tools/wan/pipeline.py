"""Wan2.2 TI2V-5B generation end to end in float64 torch: the oracle for
`kiln generate` on Wan models.

    models = Models(transformer, text_encoder, sp, vae)       # float64 modules, a SentencePiece processor
    result = generate(models, case, image=None)               # case: case.json's fields
    result["latents"]  # [1, 48, F, h, w] normalized, before the VAE
    result["video"]    # [1, 3, frames, H, W] in [-1, 1]
    result["z0"]       # image-to-video: the first frame's latent
    result["trajectory"]  # the latents after each step

Steps, as Wan's textimage2video.py (t2v / i2v) and diffusers' WanPipeline
with expand_timesteps:
  1. prompt and negative prompt (default "") through UMT5 on the padded
     512 ids with their mask; rows past the real tokens (EOS included) zeroed.
  2. noise = kiln_rng.normals(seed, 0, 48 F h w) as [1, 48, F, h, w],
     F = (frames - 1) // 4 + 1, h = height / 16, w = width / 16.
  3. image-to-video: z0 = VAE-encode(image / 127.5 - 1 as [1, 3, 1, H, W]),
     latent frame 0 set to z0 (mask 0 on frame 0, 1 elsewhere).
  4. each step: the transformer on the batch [negative; prompt] at the
     scheduler's int64 timestep (as a float), frame 0's tokens at t = 0 for
     image-to-video; v = uncond + g (cond - uncond); one sampler step
     (wan.unipc); image-to-video sets latent frame 0 back to z0.
  5. the VAE decodes the final latent (clamped to [-1, 1]).
"""
import collections
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kiln_rng  # noqa: E402
from wan import text, unipc  # noqa: E402

Models = collections.namedtuple("Models", "transformer text_encoder sp vae")
LATENT_CHANNELS = 48
TEMPORAL, SPATIAL = 4, 16


def encode_prompt(text_encoder, sp, prompt):
    """[512, d]: UMT5's output on the real tokens, zero rows after them."""
    ids, mask = text.tokenize(sp, prompt)
    with torch.no_grad():
        hidden = text_encoder(torch.from_numpy(ids)[None], torch.from_numpy(mask)[None])[0]
    context = torch.zeros_like(hidden)
    n = int(mask.sum())
    context[:n] = hidden[:n]
    return context


def latent_shape(frames, height, width):
    assert (frames - 1) % TEMPORAL == 0 and height % 32 == 0 and width % 32 == 0, "4k+1 frames, sides multiple of 32"
    return (1, LATENT_CHANNELS, (frames - 1) // TEMPORAL + 1, height // SPATIAL, width // SPATIAL)


def initial_noise(seed, shape):
    return torch.from_numpy(kiln_rng.normals(seed, 0, int(np.prod(shape))).reshape(shape)).double()


def image_to_video_input(rgb):
    """H x W x 3 bytes -> [1, 3, 1, H, W] in [-1, 1]."""
    return (torch.from_numpy(np.asarray(rgb)).double() / 127.5 - 1).permute(2, 0, 1)[None, :, None]


def generate(models, case, image=None):
    i2v = image is not None
    shape = latent_shape(case["frames"], case["height"], case["width"])
    positive = encode_prompt(models.text_encoder, models.sp, case["prompt"])
    negative = encode_prompt(models.text_encoder, models.sp, case.get("negative_prompt", ""))
    context = torch.stack([negative, positive])
    x = initial_noise(case["seed"], shape)
    z0, trajectory = None, []
    with torch.no_grad():
        if i2v:
            assert image.shape[:2] == (case["height"], case["width"]), "the image must already be W x H"
            z0 = models.vae.encode(image_to_video_input(image))
            x[:, :, :1] = z0
        sampler = unipc.SAMPLERS[case["scheduler"]](case["steps"], case["shift"])
        for t in unipc.timesteps(case["steps"], case["shift"]):
            out = models.transformer(torch.cat([x, x]), torch.full((2,), float(t), dtype=torch.float64), context,
                                     first_frame_clean=i2v)
            v = out[:1] + case["guidance_scale"] * (out[1:] - out[:1])
            x = torch.from_numpy(sampler.step(v.numpy(), x.numpy()))
            if i2v:
                x[:, :, :1] = z0
            trajectory.append(x.clone())
        video = models.vae.decode(x)
    return {"latents": x, "video": video, "z0": z0, "trajectory": trajectory}
