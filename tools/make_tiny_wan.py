#!/usr/bin/env python3
"""Make tests/models/wan-tiny: a tiny Wan2.2 TI2V-5B (DiT, UMT5 encoder,
Wan2.2 VAE, SentencePiece tokenizer) with random weights, in the diffusers
layout and in Wan's original one, plus float64 PyTorch references for each
network, the tokenizer, the schedulers and whole text/image-to-video runs:
the oracle for kiln's native Wan support.

    /usr/bin/python3 tools/make_tiny_wan.py [--out tests/models/wan-tiny]
    /usr/bin/python3 tools/make_tiny_wan.py --full DIR [--layers N]

Written under --out (README.md there lists every file and shape):

    diffusers/                   Wan-AI/Wan2.2-TI2V-5B-Diffusers' layout: model_index.json,
                                 scheduler/, tokenizer/, text_encoder/ (BF16, 2 shards + index),
                                 transformer/ (F32), vae/ (F32)
    original/                    Wan-AI/Wan2.2-TI2V-5B's layout with safetensors for its pickles:
                                 config.json, the DiT in 2 shards + index (F32, [W] names),
                                 Wan2.2_VAE.safetensors (F32), models_t5_umt5-xxl-enc-bf16.safetensors,
                                 google/umt5-xxl/ tokenizer files
    reference/<case>/{inputs,outputs}/<name>.npy   network references (float64, stored float32)
    reference/tokenizer.json     prompts and their ids
    reference/scheduler/         sigma / timestep tables and sampler trajectories
    reference/video_t2v/, video_i2v/   whole generations: case.json, latents, video, ...

Weights: torch's default distributions (uniform +-1/sqrt(fan_in) for
Linear/Conv, N(0, 1) for embeddings), norm scales N(1, 0.1) and norm biases
N(0, 0.1) so no norm is the identity, scale_shift_tables N(0, 1/dim) as
diffusers draws them; each tensor from a generator seeded by its name. UMT5's
weights are rounded to bfloat16 once; every file and reference uses those
numbers. Both layouts hold the same numbers under their own names
(wan.transformer / wan.umt5 / wan.vae to_original_names).

--full DIR writes the real TI2V-5B sizes in the diffusers layout with random
weights, for benchmarks (never committed, ~24 GB): transformer and UMT5-XXL
BF16 in shards of at most 5 GB, VAE F32, configs, the tiny tokenizer. It
streams: shapes come from shape-only (meta) modules, each tensor is drawn
and written in pieces, so memory stays under ~1 GB. --layers N cuts the DiT
and UMT5 to N layers (a quick check of the mode).

Deterministic: running it twice writes identical files. Needs torch (1.13),
numpy, sentencepiece and spm_train.
"""
import argparse
import contextlib
import copy
import json
import math
import os
import shutil
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_rng  # noqa: E402
from make_tiny_sd import write_png  # noqa: E402
from wan import pipeline, text, transformer, umt5, unipc, vae  # noqa: E402
from wan.safetensors_io import (Entry, bf16_round, read_folder, read_safetensors, write_safetensors,  # noqa: E402
                                write_sharded)

DIFFUSERS_VERSION = "0.35.0.dev0"

# diffusers' transformer/config.json. Two heads of 32: diffusers slices its RoPE
# table as [d - 2(d//3), d//3, d//3], Wan as [d - 4(d//6), 2(d//6), 2(d//6)];
# they agree for d = 32 and 128 (the real one), not for d = 16.
TRANSFORMER_CONFIG = {
    "_class_name": "WanTransformer3DModel", "_diffusers_version": DIFFUSERS_VERSION,
    "added_kv_proj_dim": None, "attention_head_dim": 32, "cross_attn_norm": True, "eps": 1e-06,
    "ffn_dim": 128, "freq_dim": 256, "image_dim": None, "in_channels": 48, "num_attention_heads": 2,
    "num_layers": 2, "out_channels": 48, "patch_size": [1, 2, 2], "pos_embed_seq_len": None,
    "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 32,
}
FULL_TRANSFORMER = dict(TRANSFORMER_CONFIG, attention_head_dim=128, num_attention_heads=24, num_layers=30,
                        ffn_dim=14336, text_dim=4096)

# transformers' text_encoder/config.json (UMT5EncoderModel); vocab_size is the tokenizer's.
UMT5_CONFIG = {
    "architectures": ["UMT5EncoderModel"], "d_ff": 64, "d_kv": 8, "d_model": 32, "decoder_start_token_id": 0,
    "dense_act_fn": "gelu_new", "dropout_rate": 0.1, "eos_token_id": 1, "feed_forward_proj": "gated-gelu",
    "initializer_factor": 1.0, "is_encoder_decoder": True, "is_gated_act": True, "layer_norm_epsilon": 1e-06,
    "model_type": "umt5", "num_decoder_layers": 2, "num_heads": 4, "num_layers": 2, "pad_token_id": 0,
    "relative_attention_max_distance": 128, "relative_attention_num_buckets": 32, "tie_word_embeddings": False,
    "tokenizer_class": "T5Tokenizer", "torch_dtype": "bfloat16", "transformers_version": "4.49.0",
    "use_cache": True, "vocab_size": None,
}
FULL_UMT5 = dict(UMT5_CONFIG, d_ff=10240, d_kv=64, d_model=4096, num_heads=64, num_layers=24,
                 num_decoder_layers=24, vocab_size=256384)

# The VAE: the real topology at widths 3 (encoder) and 4 (decoder): unequal,
# as the real 160 / 256, so that mixing base_dim and decoder_base_dim up
# shows; 1 MB a copy (widths 16 would be 15.7 MB).
VAE_BASE, VAE_DECODER_BASE = 3, 4


def vae_config(base_dim, decoder_base_dim):
    """diffusers' vae/config.json (AutoencoderKLWan, Wan2.2)."""
    return {
        "_class_name": "AutoencoderKLWan", "_diffusers_version": DIFFUSERS_VERSION, "attn_scales": [],
        "base_dim": base_dim, "clip_output": False, "decoder_base_dim": decoder_base_dim, "dim_mult": [1, 2, 4, 4],
        "dropout": 0.0, "in_channels": 12, "is_residual": True, "latents_mean": list(vae.LATENTS_MEAN),
        "latents_std": list(vae.LATENTS_STD), "num_res_blocks": 2, "out_channels": 12, "patch_size": 2,
        "scale_factor_spatial": 16, "scale_factor_temporal": 4, "temperal_downsample": [False, True, True],
        "z_dim": 48,
    }


def vae_kwargs(config):
    return {k: config[k] for k in ("base_dim", "decoder_base_dim", "z_dim", "dim_mult", "num_res_blocks",
                                   "temperal_downsample", "patch_size", "latents_mean", "latents_std")}


# scheduler/scheduler_config.json of the TI2V-5B diffusers repo (the converter's UniPC).
SCHEDULER_CONFIG = {
    "_class_name": "UniPCMultistepScheduler", "_diffusers_version": DIFFUSERS_VERSION, "beta_end": 0.02,
    "beta_schedule": "linear", "beta_start": 0.0001, "disable_corrector": [], "dynamic_thresholding_ratio": 0.995,
    "final_sigmas_type": "zero", "flow_shift": 5.0, "lower_order_final": True, "num_train_timesteps": 1000,
    "predict_x0": True, "prediction_type": "flow_prediction", "rescale_betas_zero_snr": False,
    "sample_max_value": 1.0, "solver_order": 2, "solver_p": None, "solver_type": "bh2", "steps_offset": 0,
    "thresholding": False, "time_shift_type": "exponential", "timestep_spacing": "linspace",
    "trained_betas": None, "use_beta_sigmas": False, "use_dynamic_shifting": False,
    "use_exponential_sigmas": False, "use_flow_sigmas": True, "use_karras_sigmas": False,
}

MODEL_INDEX = {
    "_class_name": "WanPipeline", "_diffusers_version": DIFFUSERS_VERSION, "boundary_ratio": None,
    "expand_timesteps": True, "scheduler": ["diffusers", "UniPCMultistepScheduler"],
    "text_encoder": ["transformers", "UMT5EncoderModel"], "tokenizer": ["transformers", "T5TokenizerFast"],
    "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": [None, None],
    "vae": ["diffusers", "AutoencoderKLWan"],
}

TOKENIZER_CONFIG = {
    "additional_special_tokens": [], "clean_up_tokenization_spaces": True, "eos_token": "</s>", "extra_ids": 0,
    "model_max_length": 1000000000000000019884624838656, "pad_token": "<pad>", "sp_model_kwargs": {},
    "tokenizer_class": "T5Tokenizer", "unk_token": "<unk>",
}
SPECIAL_TOKENS_MAP = {"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


def original_config(cfg):
    """Wan-AI/Wan2.2-TI2V-5B's config.json (WanModel); text_dim, patch size and
    the norms' options are not in it: a loader takes them from the weights."""
    return {"_class_name": "WanModel", "_diffusers_version": "0.33.0",
            "dim": cfg["num_attention_heads"] * cfg["attention_head_dim"], "eps": cfg["eps"],
            "ffn_dim": cfg["ffn_dim"], "freq_dim": cfg["freq_dim"], "in_dim": cfg["in_channels"],
            "model_type": "ti2v", "num_heads": cfg["num_attention_heads"], "num_layers": cfg["num_layers"],
            "out_dim": cfg["out_channels"], "text_len": text.MAX_LENGTH}


# ---------------------------------------------------------------- weights

NORMS = (nn.LayerNorm, transformer.RMSNorm)
LINEAR = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def init_rule(module, param_name, shape):
    """("uniform", bound) | ("normal", mean, std) for one parameter."""
    if param_name == "gamma" or isinstance(module, NORMS):
        return ("normal", 0.0 if param_name == "bias" else 1.0, 0.1)
    if param_name == "scale_shift_table":
        return ("normal", 0.0, shape[-1] ** -0.5)
    if isinstance(module, LINEAR):
        return ("uniform", math.prod(module.weight.shape[1:]) ** -0.5)
    if isinstance(module, nn.Embedding):
        return ("normal", 0.0, 1.0)
    raise TypeError(f"no init rule for {param_name} of {type(module).__name__}")


def parameters(model):
    """(name, module, param_name, shape) in state dict order."""
    for module_name, m in model.named_modules():
        for param_name, p in m.named_parameters(recurse=False):
            yield (f"{module_name}.{param_name}" if module_name else param_name), m, param_name, tuple(p.shape)


def generator(key):
    return torch.Generator().manual_seed(zlib.crc32(key.encode()))


def fill(model, prefix, bf16=False):
    """Every parameter of `model` from its rule, drawn by name (float32, or
    bfloat16 values held in float32)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, m, param_name, shape in parameters(model):
            rule, gen = init_rule(m, param_name, shape), generator(f"{prefix}/{name}")
            if rule[0] == "uniform":
                v = torch.rand(shape, generator=gen) * (2 * rule[1]) - rule[1]
            else:
                v = torch.randn(shape, generator=gen) * rule[2] + rule[1]
            if bf16:
                v = torch.from_numpy(bf16_round(v.numpy()))
            params[name].copy_(v)
    return model.eval()


def build_models(vocab_size):
    dit = fill(transformer.WanTransformer3DModel(TRANSFORMER_CONFIG), "transformer")
    te = fill(umt5.UMT5Encoder(dict(UMT5_CONFIG, vocab_size=vocab_size)), "text_encoder", bf16=True)
    cfg = vae_config(VAE_BASE, VAE_DECODER_BASE)
    autoencoder = fill(vae.WanVAE(**vae_kwargs(cfg)), "vae")
    return dit, te, autoencoder


def entries(state_dict, dtype):
    return {k: Entry(dtype, tuple(v.shape), lambda v=v: v.detach().float().numpy()) for k, v in state_dict.items()}


# ---------------------------------------------------------------- files

def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_tokenizer(folder, spiece):
    os.makedirs(folder, exist_ok=True)
    if os.path.abspath(spiece) != os.path.abspath(os.path.join(folder, "spiece.model")):
        shutil.copyfile(spiece, os.path.join(folder, "spiece.model"))
    write_json(os.path.join(folder, "tokenizer_config.json"), TOKENIZER_CONFIG)
    write_json(os.path.join(folder, "special_tokens_map.json"), SPECIAL_TOKENS_MAP)


def write_configs(folder, t_cfg, u_cfg, v_cfg, spiece):
    write_json(os.path.join(folder, "model_index.json"), MODEL_INDEX)
    write_json(os.path.join(folder, "scheduler", "scheduler_config.json"), SCHEDULER_CONFIG)
    write_json(os.path.join(folder, "transformer", "config.json"), t_cfg)
    write_json(os.path.join(folder, "text_encoder", "config.json"), u_cfg)
    write_json(os.path.join(folder, "vae", "config.json"), v_cfg)
    write_tokenizer(os.path.join(folder, "tokenizer"), spiece)


def write_diffusers(folder, dit, te, autoencoder, spiece):
    write_configs(folder, TRANSFORMER_CONFIG, te.config, vae_config(VAE_BASE, VAE_DECODER_BASE), spiece)
    write_safetensors(os.path.join(folder, "transformer", "diffusion_pytorch_model.safetensors"),
                      entries(dit.state_dict(), "F32"))
    write_sharded(os.path.join(folder, "text_encoder"), "model", entries(te.state_dict(), "BF16"), shards=2)
    write_safetensors(os.path.join(folder, "vae", "diffusion_pytorch_model.safetensors"),
                      entries(autoencoder.state_dict(), "F32"))


def write_original(folder, dit, te, autoencoder, spiece):
    write_json(os.path.join(folder, "config.json"), original_config(TRANSFORMER_CONFIG))
    write_sharded(folder, "diffusion_pytorch_model", entries(transformer.to_original_names(dit.state_dict()), "F32"),
                  shards=2)
    write_safetensors(os.path.join(folder, "Wan2.2_VAE.safetensors"),
                      entries(vae.to_original_names(autoencoder.state_dict()), "F32"))
    write_safetensors(os.path.join(folder, "models_t5_umt5-xxl-enc-bf16.safetensors"),
                      entries(umt5.to_original_names(te.state_dict()), "BF16"))
    write_tokenizer(os.path.join(folder, "google", "umt5-xxl"), spiece)


def check_files(out, dit, te, autoencoder):
    """Both layouts read back hold the models' numbers under the mapped names."""
    expected = [
        (read_safetensors(f"{out}/diffusers/transformer/diffusion_pytorch_model.safetensors"), dit.state_dict()),
        (read_folder(f"{out}/original", "diffusion_pytorch_model"), transformer.to_original_names(dit.state_dict())),
        (read_folder(f"{out}/diffusers/text_encoder", "model"), te.state_dict()),
        (read_safetensors(f"{out}/original/models_t5_umt5-xxl-enc-bf16.safetensors"),
         umt5.to_original_names(te.state_dict())),
        (read_safetensors(f"{out}/diffusers/vae/diffusion_pytorch_model.safetensors"), autoencoder.state_dict()),
        (read_safetensors(f"{out}/original/Wan2.2_VAE.safetensors"), vae.to_original_names(autoencoder.state_dict())),
    ]
    for files, state in expected:
        assert set(files) == set(state) and all(np.array_equal(files[k], state[k].numpy()) for k in state)
    print("   files read back: both layouts hold the models' exact numbers")


# ------------------------------------------------------------ references

def save_npy(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, array)


def write_case(folder, inputs, outputs):
    for k, v in inputs.items():
        save_npy(os.path.join(folder, "inputs", k + ".npy"), v)
    for k, v in outputs.items():
        save_npy(os.path.join(folder, "outputs", k + ".npy"), v)


def report(name, out64, out32=None, low=0.1, high=100):
    peak = float(out64.abs().max())
    err = "" if out32 is None else f", float32 error {float((out32.double() - out64).abs().max()) / peak:.1e} x max"
    print(f"   {name}: {list(out64.shape)} max|out| {peak:.3g}, std {float(out64.std()):.3g}{err}")
    assert low <= peak <= high, f"{name}: max|out| {peak} out of range; rescale the init"
    return out64.float().numpy()


def normals(seed, shape):
    return kiln_rng.normals(seed, 0, math.prod(shape)).reshape(shape)


def transformer_inputs():
    ctx = np.zeros((2, text.MAX_LENGTH, TRANSFORMER_CONFIG["text_dim"]), np.float32)
    ctx[0, :7] = normals(3, (7, ctx.shape[2]))
    ctx[1, :11] = normals(4, (11, ctx.shape[2]))
    return {"hidden_states": normals(2, (2, 48, 3, 4, 6)), "timestep": np.array([937.0, 937.0], np.float32),
            "encoder_hidden_states": ctx}


def write_transformer_references(ref, dit):
    inputs = transformer_inputs()
    dit64 = copy.deepcopy(dit).double()
    args32 = [torch.from_numpy(v) for v in inputs.values()]
    args64 = [a.double() for a in args32]
    outs = {}
    with torch.no_grad():
        for case, clean in (("transformer_t2v", False), ("transformer_i2v", True)):
            out64 = dit64(*args64, first_frame_clean=clean)
            outs[case] = out64
            write_case(os.path.join(ref, case), inputs,
                       {"sample": report(case, out64, dit(*args32, first_frame_clean=clean))})
        # first_frame_clean only changes frame 0's timesteps: no effect when t is 0 already.
        zero = torch.zeros(2, dtype=torch.float64)
        same = (dit64(args64[0], zero, args64[2], True) - dit64(args64[0], zero, args64[2], False)).abs().max()
        seen = []
        hook = dit64.condition_embedder.register_forward_hook(lambda m, args, out: seen.append(args[0]))
        dit64(*args64, first_frame_clean=True)
        hook.remove()
    per_frame = seen[0].view(2, 3, -1)  # [B, latent frame, tokens of a frame]
    assert (per_frame[:, 0] == 0).all() and (per_frame[:, 1:] == 937).all()
    moved = (outs["transformer_i2v"] - outs["transformer_t2v"]).abs().amax(dim=(0, 1, 3, 4))
    print(f"   first_frame_clean: change per latent frame {[f'{v:.3g}' for v in moved.tolist()]}; at t = 0: {same:.1e}")
    assert same == 0 and moved.min() > 1e-3


def check_transformer_parts(dit):
    """RoPE against [W]'s complex form, unpatchify against its einsum, names."""
    hd = TRANSFORMER_CONFIG["attention_head_dim"]
    grid = (3, 2, 3)
    x = torch.from_numpy(normals(5, (1, math.prod(grid), 2, hd))).double()
    cos, sin = transformer.rope_tables(hd, grid, torch.float64)
    ours = transformer.apply_rope(x, cos, sin)
    parts = []
    for n, d in zip(grid, transformer.rope_dims(hd)):
        freqs = torch.outer(torch.arange(n, dtype=torch.float64),
                            1.0 / torch.pow(10000, torch.arange(0, d, 2, dtype=torch.float64) / d))
        parts.append(torch.polar(torch.ones_like(freqs), freqs))
    f, h, w = grid
    table = torch.cat([parts[0].view(f, 1, 1, -1).expand(f, h, w, -1), parts[1].view(1, h, 1, -1).expand(f, h, w, -1),
                       parts[2].view(1, 1, w, -1).expand(f, h, w, -1)], -1).reshape(f * h * w, 1, -1)
    theirs = torch.view_as_real(torch.view_as_complex(x[0].reshape(f * h * w, 2, -1, 2)) * table).flatten(2)
    rope_err = float((ours[0] - theirs).abs().max())
    assert rope_err < 1e-13, rope_err
    original = transformer.to_original_names(dit.state_dict())
    assert len(set(original)) == len(original) and "blocks.0.norm3.weight" in original
    print(f"   rope vs [W]'s complex form: {rope_err:.1e}; {len(original)} tensors renamed")


def write_text_references(ref, te, sp):
    te64 = copy.deepcopy(te).double()
    for case, prompt in (("text_encoder", VIDEO_CASES["video_t2v"]["prompt"]), ("text_encoder_long", LONG_PROMPT)):
        ids, mask = text.tokenize(sp, prompt)
        n = int(mask.sum())
        with torch.no_grad():
            ids_t, mask_t = torch.from_numpy(ids)[None], torch.from_numpy(mask)[None]
            padded = te64(ids_t, mask_t)[:, :n]
            alone = te64(ids_t[:, :n])
            out32 = te(ids_t, mask_t)[:, :n]
        err = float((padded - alone).abs().max())
        print(f"   {case}: {n} tokens; padded with mask vs real tokens alone: {err:.1e}")
        assert err < 1e-12
        write_case(os.path.join(ref, case), {"input_ids": ids[None, :n]},
                   {"last_hidden_state": report(case, padded, out32)})
    # Buckets against T5's rule evaluated one distance at a time in float64.
    rel = torch.arange(-600, 600)
    ours = umt5.relative_position_bucket(rel, 32, 128)
    for r, b in zip(rel.tolist(), ours.tolist()):
        n = abs(r)
        want = (16 if r > 0 else 0) + (n if n < 8 else min(15, 8 + int(math.log(n / 8) / math.log(16) * 8)))
        assert b == want, (r, b, want)


TOKENIZER_CASES = [
    ("plain", "A red fox runs through fresh snow in a quiet forest at dawn."),
    ("html_entities", "Tom &amp; Jerry &lt;b&gt;chase&lt;/b&gt; a cat&#39;s toy&nbsp;&nbsp;today"),
    ("double_escaped", "salt &amp;amp; pepper, a &amp;lt;3 heart &amp;quot;quoted&amp;quot;"),
    ("whitespace", "  a\tcat\n\n  sits   on\r\na  mat \u3000 now  "),
    ("unicode", "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e in S\u00e3o Paulo \u2014 \u6771\u4eac \U0001f642 ok"),
    ("nfkc", "\ufb01ne \uff21\uff22\uff23 tea"),
    ("empty", ""),
]
LONG_PROMPT = " ".join(text.CORPUS.splitlines()[:12])


def write_tokenizer_reference(ref, sp):
    cases = TOKENIZER_CASES + [("truncated", " ".join([LONG_PROMPT] * 4))]
    out = []
    for name, prompt in cases:
        ids, mask = text.tokenize(sp, prompt)
        real = ids[:int(mask.sum())].tolist()
        # sentencepiece's own EOS handling gives the same ids below the limit.
        direct = sp.encode(text.clean(prompt), out_type=int, add_eos=True)
        assert real == (direct if len(direct) <= text.MAX_LENGTH else direct[:text.MAX_LENGTH - 1] + [text.EOS_ID])
        assert real[-1] == text.EOS_ID and not ids[len(real):].any()
        assert (name == "truncated") == (len(direct) > text.MAX_LENGTH)
        out.append({"name": name, "text": prompt, "clean": text.clean(prompt), "ids": real})
    write_json(os.path.join(ref, "tokenizer.json"), out)
    print(f"   tokenizer: {len(out)} cases, lengths {[len(c['ids']) for c in out]}")


def write_scheduler_references(ref):
    folder = os.path.join(ref, "scheduler")
    for n in (4, 10, 50):
        save_npy(os.path.join(folder, f"sigmas_{n}.npy"), unipc.sigmas(n, 5.0))
        save_npy(os.path.join(folder, f"timesteps_{n}.npy"), unipc.timesteps(n, 5.0))
        x_t, vs = normals(100 + n, (64,)), normals(200 + n, (n, 64))
        for kind in ("unipc", "euler"):
            traj = unipc.run(x_t, vs, kind, 5.0)
            write_case(os.path.join(folder, f"{kind}_{n}"), {"x_T": x_t, "model_outputs": vs},
                       {"trajectory": traj.astype(np.float32)})
    check_samplers()
    print(f"   scheduler: N = 4, 10, 50; timesteps_4 {unipc.timesteps(4, 5.0).tolist()}")


def check_samplers():
    """UniPC by its properties: one step lands on the x0 prediction, an
    order-1 step is the Euler step, and on Gaussian data (exact velocity
    known) the error falls ~8x per doubling of steps (Euler's ~2x)."""
    x, v = normals(7, (8,)).astype(np.float64), normals(8, (8,)).astype(np.float64)
    assert np.array_equal(unipc.run(x, v[None], "unipc")[0], x - np.float64(unipc.sigmas(1, 5.0)[0]) * v)
    vs = normals(9, (10, 8))
    assert np.abs(unipc.run(x, vs, "unipc")[0] - unipc.run(x, vs, "euler")[0]).max() < 1e-15
    mu, sd = 0.7, 0.5
    z = np.linspace(-2, 2, 5)
    errors = []
    for n in (20, 40, 80):
        sampler = unipc.UniPC(n, 5.0)
        s = sampler.sig
        x = (1 - s[0]) * mu + np.sqrt((1 - s[0]) ** 2 * sd ** 2 + s[0] ** 2) * z
        for i in range(n):
            x0 = mu + (1 - s[i]) * sd ** 2 / ((1 - s[i]) ** 2 * sd ** 2 + s[i] ** 2) * (x - (1 - s[i]) * mu)
            x = sampler.step((x - x0) / s[i], x)
        errors.append(np.abs(x - (mu + sd * z)).max())
    assert errors[0] / errors[1] > 6 and errors[1] / errors[2] > 6, errors


VIDEO_CASES = {
    "video_t2v": {"prompt": "A red fox runs through fresh snow in a quiet forest at dawn.", "negative_prompt": "",
                  "seed": 42, "steps": 4, "guidance_scale": 5.0, "frames": 9, "height": 64, "width": 96,
                  "fps": 24, "scheduler": "unipc", "shift": 5.0},
    "video_i2v": {"prompt": "The boat drifts slowly across the lake as the sun rises.", "negative_prompt": "",
                  "seed": 7, "steps": 4, "guidance_scale": 5.0, "frames": 9, "height": 64, "width": 96,
                  "fps": 24, "scheduler": "unipc", "shift": 5.0, "image": "first_frame.png"},
}


def first_frame_picture(height=64, width=96):
    """A smooth picture: warm and cool gradients with a soft bright disc."""
    y, x = np.mgrid[0:height, 0:width] / np.array([[[height - 1]], [[width - 1]]])
    disc = np.exp(-((x - 0.35) ** 2 + (y - 0.45) ** 2) / 0.03)
    r = 0.2 + 0.6 * x + 0.3 * disc
    g = 0.3 + 0.4 * np.sin(np.pi * y) + 0.2 * disc
    b = 0.8 - 0.5 * y + 0.1 * np.cos(3 * np.pi * x)
    return (np.clip(np.stack([r, g, b], -1), 0, 1) * 255).round().astype(np.uint8)


def write_vae_references(ref, autoencoder, picture):
    vae64 = copy.deepcopy(autoencoder).double()
    sample = pipeline.image_to_video_input(picture)
    latent = report("vae_encoder", vae64.encode(sample), autoencoder.encode(sample.float()))
    write_case(os.path.join(ref, "vae_encoder"), {"sample": sample.float().numpy()}, {"latent": latent})
    z = torch.from_numpy(normals(6, (1, 48, 3, 4, 6)))
    video = vae64.decode(z.double())
    clamped = float((video.abs() == 1).double().mean())
    print(f"   vae_decoder: {clamped:.1%} of the values clamped")
    write_case(os.path.join(ref, "vae_decoder"), {"latent": z.numpy()},
               {"sample": report("vae_decoder", video, autoencoder.decode(z))})
    assert clamped < 0.2


def write_video_references(ref, models, picture):
    for name, case in VIDEO_CASES.items():
        folder = os.path.join(ref, name)
        image = picture if "image" in case else None
        result = pipeline.generate(models, case, image)
        write_json(os.path.join(folder, "case.json"), case)
        save_npy(os.path.join(folder, "latents.npy"), report(f"{name} latents", result["latents"]))
        save_npy(os.path.join(folder, "trajectory.npy"), torch.stack(result["trajectory"]).float().numpy())
        save_npy(os.path.join(folder, "video.npy"), report(f"{name} video", result["video"], low=0.1, high=1))
        if image is not None:
            write_png(os.path.join(folder, case["image"]), picture)
            save_npy(os.path.join(folder, "z0.npy"), result["z0"].float().numpy())


# ---------------------------------------------------------------- README

def file_size(folder):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


def distinct_size(folder):
    seen, total = set(), 0
    for d, _, files in os.walk(folder):
        for f in files:
            data = open(os.path.join(d, f), "rb").read()
            key = zlib.crc32(data), len(data)
            if key not in seen:
                seen.add(key)
                total += len(data)
    return total


def shapes_table(ref):
    rows = []
    for case in sorted(os.listdir(ref)):
        for part in ("inputs", "outputs"):
            folder = os.path.join(ref, case, part)
            if not os.path.isdir(folder):
                continue
            for f in sorted(os.listdir(folder)):
                a = np.load(os.path.join(folder, f))
                rows.append(f"| `{case}` | {part[:-1]} | `{f[:-4]}` | {list(a.shape)} {a.dtype} |")
    return "\n".join(rows)


def write_readme(out, counts):
    t, u, v = TRANSFORMER_CONFIG, UMT5_CONFIG, vae_config(VAE_BASE, VAE_DECODER_BASE)
    dim = t["num_attention_heads"] * t["attention_head_dim"]
    text_md = f"""# wan-tiny

A tiny Wan2.2 TI2V-5B with random weights in both file layouts users hold,
and float64 PyTorch references (stored float32; ids int64) for every part:
the oracle for kiln's native Wan support. Generated, do not edit; regenerate
(deterministic: the same bytes every run) with

    /usr/bin/python3 tools/make_tiny_wan.py

The networks are tools/wan/ (transformer.py, umt5.py, vae.py), the sampler
tools/wan/unipc.py, the generation tools/wan/pipeline.py, the noise
tools/kiln_rng.py. Size: {file_size(out) / 1e6:.2f} MB besides this README, {distinct_size(out) / 1e6:.2f} MB
of distinct file contents (the tokenizer files and the transformer cases' inputs repeat).

## Networks

| part | configuration | parameters |
| --- | --- | --- |
| transformer | dim {dim} = {t['num_attention_heads']} heads x {t['attention_head_dim']}, {t['num_layers']} layers, ffn {t['ffn_dim']}, patch (1, 2, 2), in/out 48, text_dim {t['text_dim']}, freq_dim 256, eps 1e-6, qk RMSNorm across heads, affine cross-attention norm; RoPE split t/h/w = {'/'.join(map(str, transformer.rope_dims(t['attention_head_dim'])))} dims | {counts['transformer']:,} |
| text encoder (UMT5) | vocab {counts['vocab']}, d_model {u['d_model']}, {u['num_heads']} heads x d_kv {u['d_kv']}, d_ff {u['d_ff']}, {u['num_layers']} layers, 32 buckets, max distance 128, eps 1e-6, gated-gelu; weights bfloat16 | {counts['text_encoder']:,} |
| VAE | base_dim {v['base_dim']}, decoder_base_dim {v['decoder_base_dim']}, z_dim 48, dim_mult [1, 2, 4, 4], 2 res blocks, temporal downsample [F, T, T], patch 2, the real 48 latents_mean/std | {counts['vae']:,} |
| tokenizer | SentencePiece unigram, {counts['vocab']} pieces, pad 0, eos 1, unk 2, no bos, nmt_nfkc normalizer, no byte fallback; trained by tools/wan/text.py | |

Head size 32, not 16: diffusers slices its RoPE table as [d - 2(d//3), d//3, d//3],
Wan as [d - 4(d//6), 2(d//6), 2(d//6)]; they agree for 32 and the real 128, not 16.

## Files

| path | what |
| --- | --- |
| `diffusers/model_index.json` | WanPipeline, `expand_timesteps: true` (TI2V), `boundary_ratio: null` |
| `diffusers/scheduler/scheduler_config.json` | UniPCMultistepScheduler, flow_prediction, use_flow_sigmas, flow_shift 5, bh2, order 2 |
| `diffusers/tokenizer/` | `spiece.model`, `tokenizer_config.json` (T5Tokenizer), `special_tokens_map.json` |
| `diffusers/text_encoder/` | `config.json` (UMT5EncoderModel), `model-0000{{1,2}}-of-00002.safetensors` (BF16) + `model.safetensors.index.json` |
| `diffusers/transformer/` | `config.json`, `diffusion_pytorch_model.safetensors` (F32) |
| `diffusers/vae/` | `config.json` (AutoencoderKLWan), `diffusion_pytorch_model.safetensors` (F32) |
| `original/config.json` | Wan's WanModel config (dim, ffn_dim, num_heads, num_layers, in/out_dim, text_len, model_type ti2v); text_dim is not in it |
| `original/diffusion_pytorch_model-0000{{1,2}}-of-00002.safetensors` + `.safetensors.index.json` | the DiT under [W] names (F32) |
| `original/Wan2.2_VAE.safetensors` | the VAE under vae2_2.py's names (F32), in place of `Wan2.2_VAE.pth` |
| `original/models_t5_umt5-xxl-enc-bf16.safetensors` | UMT5 under [W]'s t5.py names (BF16), in place of the `.pth` |
| `original/google/umt5-xxl/` | the same tokenizer files |

## References (`reference/`)

Network cases are `<case>/inputs/<name>.npy` and `<case>/outputs/<name>.npy`,
computed in float64 from the files' numbers.

| case | in/out | name | shape |
| --- | --- | --- | --- |
{shapes_table(os.path.join(out, 'reference'))}

- `transformer_t2v`: every token at `timestep[b]`. `transformer_i2v`: the same inputs run with
  first_frame_clean: the tokens of latent frame 0 at timestep 0. `encoder_hidden_states`: rows
  past 7 (batch 0) and 11 (batch 1) are zero, as padded contexts are; cross-attention sees all 512.
- `text_encoder`, `text_encoder_long`: the prompt's real ids (EOS last); the output is the model
  run on the 512 padded ids with the attention mask, cut to the real rows (equal to running the
  real ids alone, to 1e-12). The long prompt has more than 128 tokens (the bucket clamp).
- `vae_encoder`: the i2v first frame as [1, 3, 1, 64, 96] in [-1, 1] -> normalized latent mean.
  `vae_decoder`: normalized latent -> video clamped to [-1, 1], one latent frame per call.
- `tokenizer.json`: a list of {{name, text, clean, ids}}: `clean` is the text after cleaning
  (html.unescape twice, strip, whitespace runs to one space, no ftfy), `ids` the real ids with
  EOS, unpadded (padding is 0 up to 512, mask 1 on these). Cases: plain, HTML entities (with
  &nbsp;, U+00A0), doubly escaped, runs of spaces/tabs/newlines/U+3000, unicode (unknown pieces
  fuse into one unk), nfkc (SentencePiece's nmt_nfkc maps the ligature and fullwidth letters;
  ftfy would too), empty (just EOS), truncated (cut to 511 ids + EOS).
- `scheduler/sigmas_N.npy` (float32 [N+1], final 0) and `timesteps_N.npy` (int64 [N]) for
  N = 4, 10, 50, shift 5: diffusers' UniPC flow table (linspace(1, 1/1000, N+1)[:-1] shifted, the
  first nudged to 1 - 1e-6, timesteps = int64(sigma * 1000) from float64). `unipc_N/` and
  `euler_N/`: inputs `x_T` [64], `model_outputs` [N, 64] (velocities, fixed), output
  `trajectory` [N, 64], the sample after each step (steps in float64 on the float32 sigmas).
- `video_t2v/`, `video_i2v/`: `case.json` (prompt, negative_prompt, seed, steps, guidance_scale,
  frames, height, width, fps, scheduler, shift), `latents.npy` (final normalized latents
  [1, 48, 3, 4, 6]), `trajectory.npy` (latents after each step [4, 1, 48, 3, 4, 6]),
  `video.npy` (decoded, [1, 3, 9, 64, 96] in [-1, 1]); i2v also `first_frame.png` (96 x 64 RGB)
  and `z0.npy` (its latent [1, 48, 1, 4, 6]). Noise: kiln_rng.normals(seed, 0, 48*3*4*6) as
  [1, 48, 3, 4, 6]; CFG batch [negative ""; prompt], guidance 5; the transformer at the
  scheduler's int64 timestep; i2v sets latent frame 0 to z0 before the first step and after
  every step, and its frame-0 tokens see timestep 0.
"""
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text_md)


# ------------------------------------------------------------------ tiny

def make_tiny(out):
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    spiece = os.path.join(out, "diffusers", "tokenizer", "spiece.model")
    text.train_tiny_tokenizer(spiece)
    sp = text.load(spiece)
    dit, te, autoencoder = build_models(sp.get_piece_size())
    counts = {"vocab": sp.get_piece_size(), "transformer": sum(p.numel() for p in dit.parameters()),
              "text_encoder": sum(p.numel() for p in te.parameters()),
              "vae": sum(p.numel() for p in autoencoder.parameters())}
    print(f"== wan-tiny: params {counts}")
    write_diffusers(os.path.join(out, "diffusers"), dit, te, autoencoder, spiece)
    write_original(os.path.join(out, "original"), dit, te, autoencoder, spiece)
    check_files(out, dit, te, autoencoder)

    ref = os.path.join(out, "reference")
    check_transformer_parts(dit)
    write_transformer_references(ref, dit)
    write_text_references(ref, te, sp)
    write_tokenizer_reference(ref, sp)
    write_scheduler_references(ref)
    picture = first_frame_picture()
    write_vae_references(ref, autoencoder, picture)
    models = pipeline.Models(copy.deepcopy(dit).double(), copy.deepcopy(te).double(), sp,
                             copy.deepcopy(autoencoder).double())
    write_video_references(ref, models, picture)
    write_readme(out, counts)
    print(f"== wrote {out}: {file_size(out) / 1e6:.2f} MB ({distinct_size(out) / 1e6:.2f} MB distinct)")


# ------------------------------------------------------------- full size

@contextlib.contextmanager
def meta_factories():
    """torch 1.13 has no default-device context: route the factory functions
    module constructors use to the meta device (shapes only, no memory)."""
    names = ("empty", "zeros", "ones", "randn", "rand", "tensor", "eye")
    saved = {n: getattr(torch, n) for n in names}

    def on_meta(f):
        return lambda *a, **k: f(*a, **dict(k, device=k.get("device") or "meta"))
    try:
        for n in names:
            setattr(torch, n, on_meta(saved[n]))
        yield
    finally:
        for n, f in saved.items():
            setattr(torch, n, f)


CHUNK = 1 << 24  # values drawn at a time


def full_entries(model, prefix, dtype):
    """Entries drawing each tensor in pieces: std 0.02 normals, norm scales 1."""
    def produce(name, shape, ones):
        if ones:
            yield np.ones(shape, np.float32)
            return
        gen = generator(f"{prefix}/{name}")
        n = math.prod(shape)
        for start in range(0, n, CHUNK):
            yield (torch.randn(min(CHUNK, n - start), generator=gen) * 0.02).numpy()
    out = {}
    for name, m, param_name, shape in parameters(model):
        ones = (param_name == "gamma" or isinstance(m, NORMS)) and param_name != "bias"
        out[name] = Entry(dtype, shape, lambda name=name, shape=shape, ones=ones: produce(name, shape, ones))
    return out


def make_full(out, layers):
    t_cfg = dict(FULL_TRANSFORMER, num_layers=layers or FULL_TRANSFORMER["num_layers"])
    u_cfg = dict(FULL_UMT5, num_layers=layers or FULL_UMT5["num_layers"],
                 num_decoder_layers=layers or FULL_UMT5["num_layers"])
    v_cfg = vae_config(160, 256)
    tmp_spiece = os.path.join(out, "tokenizer", "spiece.model")
    text.train_tiny_tokenizer(tmp_spiece)
    write_configs(out, t_cfg, u_cfg, v_cfg, tmp_spiece)
    with meta_factories():
        parts = [("transformer", transformer.WanTransformer3DModel(t_cfg, device="meta"), "BF16"),
                 ("text_encoder", umt5.UMT5Encoder(u_cfg, device="meta"), "BF16"),
                 ("vae", vae.WanVAE(**vae_kwargs(v_cfg)), "F32")]
    done = [0]

    def progress(name, size):
        done[0] += size
        if done[0] // (1 << 30) != (done[0] - size) // (1 << 30):
            print(f"   {done[0] / 1e9:.1f} GB written ({name})", flush=True)
    for folder, model, dtype in parts:
        es = full_entries(model, f"full/{folder}", dtype)
        size = sum(math.prod(e.shape) for e in es.values()) * (2 if dtype == "BF16" else 4)
        print(f"== {folder}: {sum(math.prod(e.shape) for e in es.values()):,} params, {size / 1e9:.2f} GB {dtype}")
        path = os.path.join(out, folder)
        if folder == "transformer":
            write_sharded(path, "diffusion_pytorch_model", es, max_bytes=5 * 10 ** 9, progress=progress)
        elif folder == "text_encoder":
            write_sharded(path, "model", es, max_bytes=5 * 10 ** 9, progress=progress)
        else:
            write_safetensors(os.path.join(path, "diffusion_pytorch_model.safetensors"), es, progress)
    print(f"== wrote {out}: {file_size(out) / 1e9:.2f} GB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "models", "wan-tiny"))
    parser.add_argument("--full", metavar="DIR", help="write full-size random TI2V-5B weights (diffusers layout)")
    parser.add_argument("--layers", type=int, help="--full: transformer and UMT5 layers (a quick check)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if args.full:
        make_full(args.full, args.layers)
    else:
        make_tiny(os.path.normpath(args.out))


if __name__ == "__main__":
    main()
