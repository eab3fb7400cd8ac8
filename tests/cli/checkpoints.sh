#!/usr/bin/env bash
# The checkpoints users hold, behind every model command: kiln show's
# summary (family, configs, dtypes, parameters, unused keys); run, bench,
# profile and compile on a network of a single file or diffusers folder
# (--component, --variant), a compiled network's .kplan giving the network's
# outputs; generate from a single file with --tokenizer and --prediction.
#
#   bash tests/cli/checkpoints.sh build/kiln
set -euo pipefail
kiln=$(realpath "$1")
ckpt="$(cd "$(dirname "${BASH_SOURCE[0]}")/../models/sd-checkpoints" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/generate_checks.sh"
cd "$tmp"
want() {  # FILE SUBSTRING...
  local file=$1
  shift
  for s in "$@"; do grep -qF -- "$s" "$file" || fail "want '$s' in: $(cat "$file")"; done
}

"$kiln" show "$ckpt/sd1.safetensors" >sd1.txt
want sd1.txt "SD 1.x, single file" "unet: 534,308 parameters" "proj_in 1x1 conv" "quick_gelu" "keys ignored: 21" \
  "keys unused: 0"
"$kiln" show "$ckpt/sd2.safetensors" >sd2.txt
# SD 2.x stops at the penultimate text layer: the last one's weights are unused.
want sd2.txt "SD 2.x, single file" "proj_in linear" "attention upcast to f32" "gelu" "keys unused: 13" \
  "cond_stage_model.model.transformer.resblocks.2.attn.in_proj_weight"
"$kiln" show "$ckpt/sd1-diffusers-sharded" --variant fp16 >fp16.txt
want fp16.txt "diffusers folder, variant fp16" "(302 f16)"
"$kiln" show "$ckpt/sd1-diffusers-sharded" >f32.txt
want f32.txt "(302 f32)"
"$kiln" show "$ckpt/sd2-diffusers" --component text_encoder >graph.txt
want graph.txt "input  %input_ids: i64[batch,77]" "output %hidden_states: f32[batch,77,64]"

# Each network runs, with the model's usual sizes where --dim gives none.
for c in unet text_encoder vae_decoder vae_encoder; do
  dims=(--dim height=8 --dim width=8)
  [[ $c == text_encoder ]] && dims=()
  "$kiln" run "$ckpt/sd1.safetensors" --component "$c" "${dims[@]}" >"$c.txt" 2>"$c.err"
  [[ $(grep -c ": f32\[" "$c.txt") -eq 1 ]] || fail "run --component $c printed no output: $(cat "$c.txt" "$c.err")"
done
want unet.err "dim 'batch' set to 2, the model's usual size"
"$kiln" run --model "$ckpt/sd1-diffusers" --component vae_decoder --dim height=4 --dim width=4 -o fp16_decoder >/dev/null 2>&1
"$kiln" run "$ckpt/sd1.safetensors" --component vae_decoder --dim height=4 --dim width=4 -o f32_decoder --seed 0 \
  >/dev/null 2>&1
cmp -s fp16_decoder/sample.npy f32_decoder/sample.npy || fail "the fp16 and f32 files (the same values) decode differently"

# A network compiled to a .kplan gives the network's outputs; the plan knows
# which network of which checkpoint it came from.
"$kiln" compile "$ckpt/sd1.safetensors" --component vae_decoder --dim batch=1 --dim height=4 --dim width=4 \
  -o decoder.kplan >compile.txt
want compile.txt "sd1.safetensors (vae_decoder)"
"$kiln" run decoder.kplan -o from_plan >/dev/null
cmp -s from_plan/sample.npy f32_decoder/sample.npy || fail "the .kplan's output differs from the checkpoint's"

"$kiln" bench "$ckpt/sd2.safetensors" --component text_encoder --iters 2 --warmup 1 --no-peak --json >bench.json 2>/dev/null
want bench.json '"model": "' 'sd2.safetensors (text_encoder)"'
# A sanitizer's allocator hides the heap counter (the figure is null there).
[[ "${KILN_SANITIZED:-0}" == 1 ]] || want bench.json '"replay_heap_allocations": 0'
"$kiln" profile "$ckpt/sd2-diffusers" --dim height=8 --dim width=8 --iters 2 --top 3 --no-peak >profile.txt 2>/dev/null
want profile.txt "kiln.Attention" "kiln.Conv"

# Text to image from a single file: its tokenizer named, its prediction type chosen.
base=(--prompt "a red circle" --steps 3 --seed 4 --width 32 --height 32 -q)
mkdir alone && ln -s "$ckpt/sd2.safetensors" alone/sd2.safetensors
expect_error "vocab.json and merges.txt" --model alone/sd2.safetensors "${base[@]}"
"$kiln" generate --model alone/sd2.safetensors --tokenizer "$ckpt/sd2-tokenizer" "${base[@]}" -o v.png
KILN_TOKENIZER_DIR="$ckpt/tokenizer" "$kiln" generate --model alone/sd2.safetensors --prediction eps "${base[@]}" -o eps.png
cmp -s v.png eps.png && fail "--prediction eps made v-prediction's image"
"$kiln" generate --model "$ckpt/sd1.safetensors" --prompt "a cat" --steps 2 --seed 1 --width 32 --height 32 -o sd1.png \
  >sd1.out 2>sd1.err
want sd1.err "SD 1.x, single file (f32 weights), epsilon (the family's default"
want sd1.out "wrote sd1.png (32x32, 2 steps of euler, seed 1"
expect_error "--prediction: x not in {eps,v}" --model "$ckpt/sd1.safetensors" --prediction x "${base[@]}"
expect_error "no fp16x variant" --model "$ckpt/sd1-diffusers-sharded" --variant fp16x "${base[@]}"
echo "checkpoints: all checks passed"
