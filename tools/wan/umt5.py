"""The UMT5 encoder (Wan's text encoder) in plain PyTorch, its modules named
as transformers' UMT5EncoderModel names them, its semantics those of Wan's
wan/modules/t5.py ([W]) and transformers' UMT5 (the same numbers).

    model = UMT5Encoder(config)                      # HF text_encoder/config.json fields
    hidden = model(input_ids, attention_mask)        # [B, L] int64 each -> [B, L, d_model]
    original = to_original_names(model.state_dict()) # [W]'s models_t5_umt5-xxl-enc-bf16.pth names

Layer: x += O(Attn(RMSNorm1(x))); x += wo(gelu_tanh(wi_0 h) * wi_1 h), h = RMSNorm2(x);
a final RMSNorm after the last layer. RMSNorm has no mean subtraction and no
bias; attention projections have no bias and the scores no 1/sqrt(d_kv)
scale; every layer adds its own relative position bias (bidirectional
buckets); keys where attention_mask is 0 are masked out.

Because the bias depends only on key - query and pad keys are masked, the
real tokens' outputs do not depend on the padding (checked in make_tiny_wan).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from wan.transformer import RMSNorm  # T5LayerNorm: the same x * rsqrt(mean(x^2) + eps) * weight


def relative_position_bucket(relative, num_buckets, max_distance):
    """T5's bidirectional bucket of key - query: half the buckets for keys
    after the query; exact below num_buckets / 4, log-spaced up to
    max_distance beyond (computed in float32, as [W] and transformers)."""
    half = num_buckets // 2
    bucket = (relative > 0).long() * half
    n = relative.abs()
    exact = half // 2
    large = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact) * (half - exact)).long()
    large = large.clamp(max=half - 1)
    return bucket + torch.where(n < exact, n, large)


class SelfAttention(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        inner = c["num_heads"] * c["d_kv"]
        self.heads = c["num_heads"]
        self.num_buckets, self.max_distance = c["relative_attention_num_buckets"], c["relative_attention_max_distance"]
        self.q = nn.Linear(c["d_model"], inner, bias=False, device=device)
        self.k = nn.Linear(c["d_model"], inner, bias=False, device=device)
        self.v = nn.Linear(c["d_model"], inner, bias=False, device=device)
        self.o = nn.Linear(inner, c["d_model"], bias=False, device=device)
        self.relative_attention_bias = nn.Embedding(self.num_buckets, self.heads, device=device)

    def position_bias(self, length):
        pos = torch.arange(length)
        bucket = relative_position_bucket(pos[None, :] - pos[:, None], self.num_buckets, self.max_distance)
        return self.relative_attention_bias(bucket).permute(2, 0, 1)  # [H, Lq, Lk]

    def forward(self, x, mask):
        q, k, v = (lin(x).unflatten(-1, (self.heads, -1)) for lin in (self.q, self.k, self.v))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) + self.position_bias(x.shape[1])
        scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        return self.o(torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).flatten(2))


class AttentionLayer(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        self.SelfAttention = SelfAttention(c, device)
        self.layer_norm = RMSNorm(c["d_model"], c["layer_norm_epsilon"], device)

    def forward(self, x, mask):
        return x + self.SelfAttention(self.layer_norm(x), mask)


class GatedGelu(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        self.wi_0 = nn.Linear(c["d_model"], c["d_ff"], bias=False, device=device)
        self.wi_1 = nn.Linear(c["d_model"], c["d_ff"], bias=False, device=device)
        self.wo = nn.Linear(c["d_ff"], c["d_model"], bias=False, device=device)

    def forward(self, x):
        return self.wo(F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x))


class FeedForwardLayer(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        self.DenseReluDense = GatedGelu(c, device)
        self.layer_norm = RMSNorm(c["d_model"], c["layer_norm_epsilon"], device)

    def forward(self, x):
        return x + self.DenseReluDense(self.layer_norm(x))


class Block(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        self.layer = nn.ModuleList([AttentionLayer(c, device), FeedForwardLayer(c, device)])

    def forward(self, x, mask):
        return self.layer[1](self.layer[0](x, mask))


class Stack(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        self.block = nn.ModuleList([Block(c, device) for _ in range(c["num_layers"])])
        self.final_layer_norm = RMSNorm(c["d_model"], c["layer_norm_epsilon"], device)

    def forward(self, x, mask):
        for block in self.block:
            x = block(x, mask)
        return self.final_layer_norm(x)


class UMT5Encoder(nn.Module):
    def __init__(self, config, device=None):
        super().__init__()
        c = config
        self.config = dict(c)
        assert c["feed_forward_proj"] == "gated-gelu" and c["dense_act_fn"] == "gelu_new", "UMT5's gated tanh-GELU"
        self.shared = nn.Embedding(c["vocab_size"], c["d_model"], device=device)
        self.encoder = Stack(c, device)

    def forward(self, input_ids, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return self.encoder(self.shared(input_ids), attention_mask)


def original_name(name):
    """transformers' UMT5EncoderModel key -> [W]'s (the fact sheet, section 2)."""
    fixed = {"shared.weight": "token_embedding.weight", "encoder.final_layer_norm.weight": "norm.weight"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".")  # encoder.block.<i>.layer.<j>.<rest>
    assert parts[:2] == ["encoder", "block"] and parts[3] == "layer", name
    i, rest = parts[2], ".".join(parts[5:])
    table = {
        "SelfAttention.q.weight": "attn.q.weight", "SelfAttention.k.weight": "attn.k.weight",
        "SelfAttention.v.weight": "attn.v.weight", "SelfAttention.o.weight": "attn.o.weight",
        "SelfAttention.relative_attention_bias.weight": "pos_embedding.embedding.weight",
        "DenseReluDense.wi_0.weight": "ffn.gate.0.weight", "DenseReluDense.wi_1.weight": "ffn.fc1.weight",
        "DenseReluDense.wo.weight": "ffn.fc2.weight",
    }
    if rest == "layer_norm.weight":
        return f"blocks.{i}.norm{int(parts[4]) + 1}.weight"
    if rest not in table:
        raise KeyError(f"UMT5 key {name} has no original name")
    return f"blocks.{i}.{table[rest]}"


def to_original_names(state_dict):
    return {original_name(k): v for k, v in state_dict.items()}
