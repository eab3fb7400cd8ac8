"""The models bench/compare runs, as PyTorch definitions (tools/make_reference_models.py's
classes at full size) with random weights, exported once to ONNX under bench/out/compare/<name>/:
model.onnx, state.pt (the same weights for the PyTorch runs) and inputs/<input>.npy.

    /usr/bin/python3 bench/compare/models.py [--only dit_tiny dit_small] [--refresh]
"""
import argparse
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_reference_models as ref  # noqa: E402

OUT = os.path.join(ROOT, "bench", "out", "compare")


def dit(size, dim, depth, heads):
    def make(gen):
        model = ref.DiT(size=size, dim=dim, depth=depth, heads=heads)
        inputs = {"x": torch.randn(2, 4, size, size, generator=gen), "t": torch.tensor([999.0, 250.0])}
        return model, inputs, ["out"]
    return make


def unet_sd15(gen):
    # SD 1.5's widths and cross-attention size, no transformer at the lowest
    # level; one ResNet per level on the way down (make_reference_models' UNet).
    model = ref.UNet(chans=(320, 640, 1280, 1280), heads=8, context_dim=768, attention=(True, True, True, False))
    inputs = {"sample": torch.randn(2, 4, 32, 32, generator=gen), "timestep": torch.tensor([981.0, 981.0]),
              "encoder_hidden_states": torch.randn(2, 77, 768, generator=gen)}
    return model, inputs, ["out_sample"]


def vae_decoder_256(gen):
    # SD's decoder widths (512, 512, 256) with 3 ResNets a block: latent 32x32 -> image 256x256.
    model = ref.VaeDecoder(chans=(512, 512, 256), resnets_per_block=3)
    return model, {"latent": torch.randn(1, 4, 32, 32, generator=gen)}, ["image"]


def clip_l(gen):
    model = ref.TextEncoder(vocab=49408, dim=768, heads=12, layers=12, max_len=77)
    with torch.no_grad():
        model.tok.weight.mul_(0.02)
        model.pos.weight.mul_(0.01)
    ids = torch.randint(1, 49406, (2, 77), generator=gen)
    ids[:, 0], ids[:, 20:] = 49406, 49407  # BOS, words, EOS padding (the largest id)
    return model, {"input_ids": ids}, ["last_hidden_state", "pooler_output"]


# name: (maker, what it is). Order: smallest first, so a partial run says something.
MODELS = {
    "dit_tiny": (dit(8, 64, 6, 4), "DiT hidden 64, depth 6, 16 tokens, batch 2 (dispatch-bound)"),
    "dit_small": (dit(32, 384, 6, 6), "DiT hidden 384, depth 6, 256 tokens, batch 2"),
    "clip_l": (clip_l, "CLIP-L-sized text encoder: width 768, 12 layers, 12 heads, 77 tokens, batch 2"),
    "vae_decoder_256": (vae_decoder_256, "VAE decoder (512, 512, 256), latent 4x32x32 -> 3x256x256"),
    "unet_sd15": (unet_sd15, "SD 1.5-width UNet (320/640/1280/1280, cross-attention 768) at 256x256 "
                  "(latent 32x32), batch 2"),
    "dit_medium": (dit(64, 1152, 12, 16), "DiT hidden 1152, depth 12, 1024 tokens, batch 2"),
}


def build(name, maker=None):
    """The model, its inputs and output names; weights from state.pt when it exists."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model, inputs, outputs = (maker or MODELS[name][0])(gen)
    model.eval()
    state = os.path.join(OUT, name, "state.pt")
    if os.path.exists(state):
        model.load_state_dict(torch.load(state))
    return model, inputs, outputs


def export(name):
    folder = os.path.join(OUT, name)
    os.makedirs(os.path.join(folder, "inputs"), exist_ok=True)
    model, inputs, outputs = build(name)
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs.values()), os.path.join(folder, "model.onnx"),
                          input_names=list(inputs), output_names=outputs)
    torch.save(model.state_dict(), os.path.join(folder, "state.pt"))
    for k, v in inputs.items():
        np.save(os.path.join(folder, "inputs", k + ".npy"), v.numpy())
    params = sum(p.numel() for p in model.parameters())
    print(f"exported {name}: {params / 1e6:.1f}M parameters, "
          f"{os.path.getsize(os.path.join(folder, 'model.onnx')) / 1e6:.0f} MB", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(MODELS), metavar="NAME")
    parser.add_argument("--refresh", action="store_true", help="export again even if the files exist")
    args = parser.parse_args()
    for name in args.only or MODELS:
        if args.refresh or not os.path.exists(os.path.join(OUT, name, "state.pt")):
            export(name)


if __name__ == "__main__":
    main()
