#!/usr/bin/env python3
"""Train kiln's default text-to-image model: coloured shapes from captions.

The images and their captions are drawn from a closed grammar (every word
below), rendered procedurally at 64 x 64. A small VAE (4x: 16 x 16 x 4
latents) is trained first, then a CLIP-style text encoder and an SD-style
UNet together with the DDPM objective (epsilon prediction, SD's
scaled_linear schedule, the caption dropped 10 % of the time for
classifier-free guidance; the exported weights are an exponential moving
average). The networks are tools/make_reference_models.py's, so the export
has the op patterns of an SD 1.5 export; it is written in the pipeline
folder layout `kiln generate` reads, with recipe.json holding the recipe and
the final losses and vocabulary.json the grammar below (for `kiln generate
--help` and its warning on other words). PyTorch's latents and image for two
fixed prompts and seeds go to --reference-out: kiln must match them.

    caption  = COUNT [SIZE] COLOUR SHAPE[s] [POSITION] [on a COLOUR background]
    COUNT    = a | one | two | three
    SIZE     = small | large
    COLOUR   = red | green | blue | yellow | white | black
    SHAPE    = circle | square | triangle
    POSITION = at the top left | at the top right | at the bottom left | at the bottom right
             | in the center | at the top | at the bottom | on the left | on the right   (one shape only)

Deterministic for a given --seed and --minutes budget up to the wall clock
(the number of training steps is what the budget allows; it is recorded).

    /usr/bin/python3 tools/train_default_model.py [--minutes 75] [--out models/shapes]
        [--reference-out tests/data/default-model-reference] [--checkpoint FILE.pt]

Needs OpenBLAS (KILN_SETUP_PYTHON=1 tools/setup.sh installs it). On 2 cores
a training step (batch 32) takes about 0.65 s for the VAE and 0.4 s for the
text encoder + UNet, so 75 minutes is some 650 VAE and 10,000 diffusion
steps. The UNet has no attention at 16 x 16, where self-attention over 256
positions took half of each step.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clip_bpe  # noqa: E402
from make_reference_models import TextEncoder, UNet, VaeDecoder  # noqa: E402
import make_tiny_sd  # noqa: E402
from make_tiny_sd import VaeEncoder, export, write_json  # noqa: E402

SIZE = 64            # image side, pixels
FACTOR = 4           # VAE downsampling
LATENT_CHANNELS = 4
MAX_LENGTH = 16      # tokens per caption, BOS and EOS included
CONTEXT_DIM = 128

SHAPES = ("circle", "square", "triangle")
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (240, 210, 40),
           "white": (245, 245, 245), "black": (20, 20, 20)}
COUNTS = {"a": 1, "one": 1, "two": 2, "three": 3}
SIZES = {"small": 0.11, "": 0.17, "large": 0.26}  # radius as a fraction of the side
POSITIONS = {"at the top left": (0.27, 0.27), "at the top right": (0.73, 0.27), "at the bottom left": (0.27, 0.73),
             "at the bottom right": (0.73, 0.73), "in the center": (0.5, 0.5), "at the top": (0.5, 0.25),
             "at the bottom": (0.5, 0.75), "on the left": (0.25, 0.5), "on the right": (0.75, 0.5)}
BATCH = 32
VAE_LR, DIFFUSION_LR, EMA_DECAY = 1e-3, 6e-4, 0.999
VAE_SHARE = 0.12     # of the time budget
# Attention only at 8 x 8 and 4 x 4: at 16 x 16 self-attention took half of a
# training step and left too few steps for the budget.
UNET = {"chans": (32, 64, 128), "attention": (False, True, True), "heads": 4}
GRAMMAR = "COUNT [SIZE] COLOUR SHAPE[s] [POSITION] [on a COLOUR background]"
SCHEDULER_CONFIG = {"_class_name": "EulerDiscreteScheduler", "_diffusers_version": "0.21.0", "beta_end": 0.012,
                    "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
                    "prediction_type": "epsilon", "set_alpha_to_one": False, "steps_offset": 1,
                    "timestep_spacing": "leading", "use_karras_sigmas": False}


# --------------------------------------------------------------- the data

def sample_scene(rng):
    """A random scene and its caption: {shape, colour, background, count,
    size, centres}. Unnamed attributes are random (the background) or the
    middle value (the size); shapes never overlap."""
    shape, colour = SHAPES[rng.integers(3)], list(COLOURS)[rng.integers(6)]
    background = rng.choice([c for c in COLOURS if c != colour])
    count_word = list(COUNTS)[rng.integers(4)]
    count = COUNTS[count_word]
    size_word = list(SIZES)[rng.integers(3)]
    radius = SIZES[size_word] * (0.7 if count > 1 and size_word == "large" else 1.0)  # room for them all
    position = ""
    if count == 1 and rng.random() < 0.6:
        position = list(POSITIONS)[rng.integers(len(POSITIONS))]
        centres = [POSITIONS[position]]
    else:
        centres, tries = [], 0
        while len(centres) < count:
            c = tuple(rng.uniform(radius + 0.04, 1 - radius - 0.04, 2))
            if all(math.dist(c, o) > 2 * radius + 0.05 for o in centres):
                centres.append(c)
            tries += 1
            if tries % 50 == 0:  # the first ones left no room: start again
                centres = []
    words = [count_word] + ([size_word] if size_word else []) + [colour, shape + ("s" if count > 1 else "")]
    if position:
        words.append(position)
    if rng.random() < 0.7:
        words.append(f"on a {background} background")
    return {"caption": " ".join(words), "shape": shape, "colour": colour, "background": background,
            "count": count, "radius": radius, "centres": centres}


def render(scene, size=SIZE, oversample=2):
    """The scene as bytes [size, size, 3], edges anti-aliased by oversampling."""
    n = size * oversample
    y, x = (np.mgrid[0:n, 0:n] + 0.5) / n
    img = np.empty((n, n, 3), np.float32)
    img[:] = COLOURS[scene["background"]]
    r = scene["radius"]
    for cx, cy in scene["centres"]:
        if scene["shape"] == "circle":
            inside = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        elif scene["shape"] == "square":
            side = r * 0.886 * 2  # the disc's area
            inside = (abs(x - cx) < side / 2) & (abs(y - cy) < side / 2)
        else:  # upright equilateral triangle of the disc's area, centred on its centroid
            s = r * 2.69
            h = s * math.sqrt(3) / 2
            top, base = cy - 2 * h / 3, cy + h / 3
            half = (y - top) / h * s / 2
            inside = (y > top) & (y < base) & (abs(x - cx) < half)
        img[inside] = COLOURS[scene["colour"]]
    return img.reshape(size, oversample, size, oversample, 3).mean(axis=(1, 3)).round().astype(np.uint8)


def batch(rng, tokenizer, n):
    scenes = [sample_scene(rng) for _ in range(n)]
    images = np.stack([render(s) for s in scenes]).astype(np.float32) / 255.0 * 2.0 - 1.0
    ids = torch.tensor([tokenizer(s["caption"], MAX_LENGTH) for s in scenes], dtype=torch.int64)
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), ids, scenes


def write_vocabulary(path):
    """vocabulary.json: the grammar, its parts and every word it uses, for
    `kiln generate --help` and its warning on words the model never saw."""
    parts = {"COUNT": list(COUNTS), "SIZE": [s for s in SIZES if s], "COLOUR": list(COLOURS), "SHAPE": list(SHAPES),
             "POSITION": list(POSITIONS)}
    words = {w for phrases in parts.values() for phrase in phrases for w in phrase.split()}
    words |= {s + "s" for s in SHAPES} | {"on", "a", "background"}
    write_json(path, {"grammar": GRAMMAR, "parts": parts, "words": sorted(words),
                      "notes": ["a POSITION goes with one shape only",
                                "what a caption leaves out, such as the background or where the shapes go, is drawn at random"],
                      "examples": ["a red circle on a blue background", "two green squares",
                                   "a small yellow triangle at the top left"]})


def all_captions():
    """Every word of the grammar in context, for the tokenizer's merges."""
    rng = np.random.default_rng(0)
    return [sample_scene(rng)["caption"] for _ in range(4000)]


# ------------------------------------------------------------ the networks

def alphas_cumprod():
    c = SCHEDULER_CONFIG
    betas = np.linspace(c["beta_start"] ** 0.5, c["beta_end"] ** 0.5, c["num_train_timesteps"]) ** 2
    return torch.from_numpy(np.cumprod(1 - betas)).float()


# ---------------------------------------------------------------- training

def train_vae(encoder, decoder, rng, tokenizer, seconds, log):
    params = list(encoder.parameters()) + list(decoder.parameters())
    opt = torch.optim.AdamW(params, lr=VAE_LR)
    start, step, loss_avg = time.time(), 0, None
    while time.time() - start < seconds:
        images, _, _ = batch(rng, tokenizer, BATCH)
        mean, logvar = encoder(images).chunk(2, dim=1)
        z = mean + torch.exp(0.5 * logvar.clamp(-30, 20)) * torch.randn_like(mean)
        recon = F.mse_loss(decoder(z), images)
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).mean()
        loss = recon + 1e-4 * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        loss_avg = recon.item() if loss_avg is None else 0.98 * loss_avg + 0.02 * recon.item()
        if step % 200 == 0:
            log(f"vae step {step}: reconstruction mse {loss_avg:.5f}")
    return {"steps": step, "reconstruction_mse": loss_avg}


def train_diffusion(text, unet, encoder, scaling, rng, tokenizer, seconds, log):
    """Returns the losses and the EMA of the weights (decay EMA_DECAY), which
    is what gets exported: it draws cleaner pictures than the last step's."""
    params = list(text.parameters()) + list(unet.parameters())
    opt = torch.optim.AdamW(params, lr=DIFFUSION_LR, weight_decay=0.01)
    ema = [p.detach().clone() for p in params]
    ac = alphas_cumprod()
    empty = torch.tensor([tokenizer("", MAX_LENGTH)], dtype=torch.int64)
    start, step, loss_avg = time.time(), 0, None
    while (elapsed := time.time() - start) < seconds:
        # Linear warm-up, then a cosine decay to a tenth over the time budget.
        lr = DIFFUSION_LR * min(1.0, (step + 1) / 200) * (0.55 + 0.45 * math.cos(math.pi * elapsed / seconds))
        for group in opt.param_groups:
            group["lr"] = lr
        images, ids, _ = batch(rng, tokenizer, BATCH)
        with torch.no_grad():
            mean, logvar = encoder(images).chunk(2, dim=1)
            x0 = (mean + torch.exp(0.5 * logvar.clamp(-30, 20)) * torch.randn_like(mean)) * scaling
        drop = torch.rand(len(ids)) < 0.1  # classifier-free guidance's unconditional case
        ids = torch.where(drop[:, None], empty.expand_as(ids), ids)
        t = torch.randint(0, len(ac), (len(ids),))
        noise = torch.randn_like(x0)
        a = ac[t][:, None, None, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        loss = F.mse_loss(unet(xt, t.float(), text(ids)[0]), noise)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():
            decay = min(EMA_DECAY, (1 + step) / (10 + step))  # a short memory while the weights move fast
            for e, p in zip(ema, params):
                e.mul_(decay).add_(p.detach(), alpha=1 - decay)
        step += 1
        loss_avg = loss.item() if loss_avg is None else 0.99 * loss_avg + 0.01 * loss.item()
        if step % 200 == 0:
            log(f"diffusion step {step}: loss {loss_avg:.4f}, lr {lr:.2e} ({elapsed / 60:.1f} min)")
    with torch.no_grad():
        for e, p in zip(ema, params):
            p.copy_(e)
    return {"steps": step, "loss": loss_avg}


# ------------------------------------------------------------------ export

# kiln's image for these must match PyTorch's (tests/pipeline/default_model_test.cc).
REFERENCE_CASES = [("red_circle_euler", "a red circle on a blue background", 1, "euler"),
                   ("two_green_squares_dpmpp_2m", "two green squares", 2, "dpmpp_2m")]


def write_reference(out, tokenizer, text, unet, decoder, encoder, scaling):
    """The PyTorch pipeline's latents and image for REFERENCE_CASES, written
    as tests/models/tiny-sd's reference cases are."""
    spec = {"max_length": MAX_LENGTH, "factor": FACTOR, "scaling_factor": scaling, "scheduler": SCHEDULER_CONFIG}
    for name, prompt, seed, scheduler in REFERENCE_CASES:
        trajectory, _, pixels = make_tiny_sd.generate(tokenizer, text, unet, decoder, encoder, prompt, "", seed, 20, 7.5,
                                                      scheduler, SIZE, SIZE, spec=spec)
        make_tiny_sd.write_reference_case(os.path.join(out, name), trajectory, pixels, {
            "prompt": prompt, "negative_prompt": "", "seed": seed, "steps": 20, "guidance_scale": 7.5,
            "scheduler": scheduler, "width": SIZE, "height": SIZE})


def export_pipeline(out, text, unet, decoder, encoder, scaling, vocab_size, recipe):
    write_json(os.path.join(out, "model_index.json"), {
        "_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.21.0",
        "scheduler": ["diffusers", SCHEDULER_CONFIG["_class_name"]],
        "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"], "vae_decoder": ["diffusers", "AutoencoderKL"],
        "vae_encoder": ["diffusers", "AutoencoderKL"], "requires_safety_checker": False})
    write_json(os.path.join(out, "scheduler", "scheduler_config.json"), SCHEDULER_CONFIG)
    write_json(os.path.join(out, "text_encoder", "config.json"), {
        "architectures": ["CLIPTextModel"], "hidden_size": CONTEXT_DIM, "max_position_embeddings": MAX_LENGTH,
        "vocab_size": vocab_size, "hidden_act": "quick_gelu"})
    write_json(os.path.join(out, "unet", "config.json"), {
        "_class_name": "UNet2DConditionModel", "in_channels": LATENT_CHANNELS, "out_channels": LATENT_CHANNELS,
        "sample_size": SIZE // FACTOR, "cross_attention_dim": CONTEXT_DIM})
    vae = {"_class_name": "AutoencoderKL", "in_channels": 3, "out_channels": 3, "latent_channels": LATENT_CHANNELS,
           # kiln reads the VAE factor as 2^(len - 1): three entries, 4x.
           "block_out_channels": [32, 64, 64], "scaling_factor": scaling, "sample_size": SIZE}
    write_json(os.path.join(out, "vae_decoder", "config.json"), vae)
    write_json(os.path.join(out, "vae_encoder", "config.json"), vae)
    h = SIZE // FACTOR
    export(text, (torch.zeros(2, MAX_LENGTH, dtype=torch.int64),), os.path.join(out, "text_encoder", "model.onnx"),
           ["input_ids"], ["last_hidden_state", "pooler_output"],
           {"input_ids": {0: "batch"}, "last_hidden_state": {0: "batch"}, "pooler_output": {0: "batch"}})
    export(unet, (torch.zeros(2, LATENT_CHANNELS, h, h), torch.tensor([981.0, 981.0]),
                  torch.zeros(2, MAX_LENGTH, CONTEXT_DIM)),
           os.path.join(out, "unet", "model.onnx"), ["sample", "timestep", "encoder_hidden_states"], ["out_sample"],
           {"sample": {0: "batch", 2: "height", 3: "width"}, "timestep": {0: "batch"},
            "encoder_hidden_states": {0: "batch"}, "out_sample": {0: "batch", 2: "height", 3: "width"}},
           external_data=True)
    export(decoder, (torch.zeros(1, LATENT_CHANNELS, h, h),), os.path.join(out, "vae_decoder", "model.onnx"),
           ["latent_sample"], ["sample"], {"latent_sample": {0: "batch", 2: "height", 3: "width"},
                                           "sample": {0: "batch", 2: "image_height", 3: "image_width"}})
    export(encoder, (torch.zeros(1, 3, SIZE, SIZE),), os.path.join(out, "vae_encoder", "model.onnx"), ["sample"],
           ["latent_parameters"], {"sample": {0: "batch", 2: "height", 3: "width"},
                                   "latent_parameters": {0: "batch", 2: "latent_height", 3: "latent_width"}})
    write_json(os.path.join(out, "recipe.json"), recipe)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="models/shapes", help="pipeline folder to write (default: models/shapes)")
    parser.add_argument("--minutes", type=float, default=75, help="training budget, VAE included (default: 75)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference-out", default="tests/data/default-model-reference",
                        help="where to write PyTorch's latents and images for fixed prompts and seeds")
    parser.add_argument("--checkpoint", help="also save the trained networks' state here (torch.save)")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(os.cpu_count() or 1)  # Debian's torch starts with one
    rng = np.random.default_rng(args.seed)
    begin = time.time()
    log = lambda line: print(f"[{(time.time() - begin) / 60:5.1f} min] {line}", flush=True)  # noqa: E731

    os.makedirs(args.out, exist_ok=True)
    tok_dir = os.path.join(args.out, "tokenizer")
    clip_bpe.write_tokenizer_dir(tok_dir, max_length=MAX_LENGTH, corpus=all_captions())
    write_vocabulary(os.path.join(args.out, "vocabulary.json"))
    tokenizer = clip_bpe.ClipTokenizer(tok_dir)
    vocab_size = len(tokenizer.encoder)

    # Two 2x steps each way: 4x.
    encoder = VaeEncoder(chans=(32, 64))
    decoder = VaeDecoder(latent_ch=LATENT_CHANNELS, chans=(64, 32), resnets_per_block=1)
    vae = train_vae(encoder, decoder, rng, tokenizer, args.minutes * 60 * VAE_SHARE, log)
    encoder.eval()
    decoder.eval()
    with torch.no_grad():  # SD's convention: latents scaled to unit variance
        images, _, _ = batch(rng, tokenizer, 256)
        scaling = float(1.0 / encoder(images).chunk(2, dim=1)[0].std())
    log(f"vae: {vae}, scaling_factor {scaling:.5f}")

    text = TextEncoder(vocab=vocab_size, dim=CONTEXT_DIM, heads=4, layers=2, max_len=MAX_LENGTH)
    unet = UNet(in_ch=LATENT_CHANNELS, context_dim=CONTEXT_DIM, **UNET)
    diffusion = train_diffusion(text, unet, encoder, scaling, rng, tokenizer,
                                args.minutes * 60 - (time.time() - begin), log)
    text.eval()
    unet.eval()
    recipe = {"seed": args.seed, "minutes": args.minutes, "vae": vae, "diffusion": diffusion,
              "scaling_factor": scaling, "batch": BATCH, "vae_lr": VAE_LR, "diffusion_lr": DIFFUSION_LR,
              "lr_schedule": "200-step warm-up, cosine to 0.1 over the budget", "ema_decay": EMA_DECAY,
              "caption_dropout": 0.1, "unet": UNET, "parameters": {
                  "text_encoder": sum(p.numel() for p in text.parameters()),
                  "unet": sum(p.numel() for p in unet.parameters()),
                  "vae_decoder": sum(p.numel() for p in decoder.parameters()),
                  "vae_encoder": sum(p.numel() for p in encoder.parameters())},
              "torch": torch.__version__, "threads": torch.get_num_threads()}
    if args.checkpoint:
        torch.save({"text_encoder": text.state_dict(), "unet": unet.state_dict(), "vae_decoder": decoder.state_dict(),
                    "vae_encoder": encoder.state_dict(), "recipe": recipe}, args.checkpoint)
    export_pipeline(args.out, text, unet, decoder, encoder, scaling, vocab_size, recipe)
    write_reference(args.reference_out, tokenizer, text, unet, decoder, encoder, scaling)
    log(f"wrote {args.out}: {json.dumps(recipe)}")


if __name__ == "__main__":
    main()
