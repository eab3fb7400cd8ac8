#!/usr/bin/env bash
# kiln generate on tests/models/tiny-sd: the modes agree, a seed makes the
# same PNG byte for byte, the PNG carries what made it, progress goes to
# stderr (nothing with --quiet); a pipeline folder with a missing, truncated
# or malformed file, and a bad flag, each give one error line and exit code 2.
#
#   bash tests/cli/generate.sh build/kiln
set -euo pipefail
kiln=$(realpath "$1")
tiny_sd="$(cd "$(dirname "${BASH_SOURCE[0]}")/../models/tiny-sd" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/generate_checks.sh"
cd "$tmp"

base=(--model "$tiny_sd" --prompt "a cat")
args=("${base[@]}" --steps 4 --seed 1)
for mode in eager graph graph-loop auto; do
  "$kiln" generate "${args[@]}" --mode "$mode" -o "$mode.png" >"$mode.out" 2>"$mode.err"
  grep -q "^wrote $mode.png (64x64, 4 steps of euler, seed 1" "$mode.out" || fail "$mode: $(cat "$mode.out")"
  [[ $(grep -c "^kiln: step [1-4]/4$" "$mode.err") -eq 4 ]] || fail "$mode: no progress lines: $(cat "$mode.err")"
done
cmp -s graph.png graph-loop.png || fail "graph and graph-loop made different images"
"$kiln" generate "${args[@]}" -o again.png -q >quiet.out 2>quiet.err
cmp -s graph-loop.png again.png || fail "the same seed made a different PNG"
[[ ! -s quiet.out && ! -s quiet.err ]] || fail "--quiet printed: $(cat quiet.out quiet.err)"
"$kiln" generate "${base[@]}" --steps 4 --seed 2 -o other.png -q
cmp -s again.png other.png && fail "another seed made the same PNG"

# The PNG's text chunks (iTXt, uncompressed: the text is in the file as is).
for text in prompt "a cat" seed steps scheduler euler model tiny-sd parameters "Sampler: euler"; do
  grep -aq "$text" again.png || fail "the PNG has no '$text' text"
done

"$kiln" generate "${args[@]}" -o profile.png -q --profile >profile.out
for stage in tokenize "text encoder" "denoise loop" "vae decode" png "host overhead per step"; do
  grep -q "$stage" profile.out || fail "--profile lacks '$stage': $(cat profile.out)"
done
"$kiln" generate "${args[@]}" --batch 2 -o batch.png -q
[[ -s batch-1.png && -s batch-2.png ]] || fail "--batch 2 did not write batch-1.png and batch-2.png"

# Image to image: the picture's size is the output's.
init="$tiny_sd/reference/img2img_ddim/init.png"
"$kiln" generate "${args[@]}" --init-image "$init" --strength 0.5 -o img2img.png >img2img.out 2>/dev/null
grep -q "^wrote img2img.png (64x48, 4 steps of euler" img2img.out || fail "image to image: $(cat img2img.out)"
grep -aq "Denoising strength: 0.5" img2img.png || fail "the PNG lacks the strength"

# Over twice the VAE's 64-pixel tile: decoded in tiles unless told not to.
"$kiln" generate "${args[@]}" --width 144 --height 96 -o tiled.png -q --profile >tiled.out
grep -q "vae decode .*(in tiles)" tiled.out || fail "144x96 was not decoded in tiles: $(cat tiled.out)"
"$kiln" generate "${args[@]}" --width 144 --height 96 -o whole.png -q --profile --vae-tiling off >whole.out
grep -q "(in tiles)" whole.out && fail "--vae-tiling off still decoded in tiles"


# A copy of the folder with one file broken at a time.
broken() {  # FILE HOW (rm | truncate | garble)
  rm -rf sd && cp -r "$tiny_sd" sd
  case $2 in
    rm) rm "sd/$1" ;;
    truncate) head -c $(($(stat -c %s "sd/$1") / 2)) "sd/$1" >cut && mv cut "sd/$1" ;;
    garble) printf '{"not": json' >"sd/$1" ;;
  esac
}
for file in model_index.json scheduler/scheduler_config.json tokenizer/vocab.json tokenizer/merges.txt \
            text_encoder/model.onnx unet/model.onnx unet/model.onnx_data vae_decoder/model.onnx; do
  broken "$file" rm
  expect_error "sd/$file" --model sd --prompt "a cat" --steps 2 --seed 1
done
for file in text_encoder/model.onnx unet/model.onnx unet/model.onnx_data vae_decoder/model.onnx \
            tokenizer/vocab.json scheduler/scheduler_config.json; do
  broken "$file" truncate
  want="sd/$file"
  [[ $file == unet/model.onnx_data ]] && want="lies past the end of 'model.onnx_data'"  # named by model.onnx
  expect_error "$want" --model sd --prompt "a cat" --steps 2 --seed 1
done
for file in model_index.json scheduler/scheduler_config.json tokenizer/vocab.json tokenizer/special_tokens_map.json \
            unet/config.json vae_decoder/config.json; do
  broken "$file" garble
  expect_error "sd/$file" --model sd --prompt "a cat" --steps 2 --seed 1
done
broken vae_decoder/config.json keep
printf '{"scaling_factor": "big"}' >sd/vae_decoder/config.json
expect_error "scaling_factor" --model sd --prompt "a cat" --steps 2

broken vae_encoder/model.onnx rm
expect_error "sd/vae_encoder/model.onnx" --model sd --prompt "a cat" --steps 2 --init-image "$init"
head -c 100 "$init" >cut.png
expect_error "cut.png: a corrupt or truncated PNG" "${base[@]}" --init-image cut.png
expect_error "nothing.png: no such file" "${base[@]}" --init-image nothing.png
expect_error "strength" "${base[@]}" --init-image "$init" --strength 0

expect_error "--vae-tiling" "${base[@]}" --vae-tiling maybe
expect_error "nowhere: no such file or folder" --model nowhere --prompt "a cat"
expect_error "--steps must be at least 1" "${base[@]}" --steps 0
expect_error "multiple of 8" "${base[@]}" --width 60
expect_error "unknown scheduler" "${base[@]}" --scheduler pndm
expect_error "unknown mode 'fast'" "${base[@]}" --mode fast
expect_error "the batch must be 1 to 64" "${base[@]}" --batch 0
expect_error "--prompt is required" --model "$tiny_sd"
expect_error "does not exist" "${base[@]}" -o nowhere/out.png
echo "generate: all checks passed"
