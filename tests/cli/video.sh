#!/usr/bin/env bash
# kiln generate with a Wan model (tests/models/wan-tiny): text to video and
# image to video as MP4s, checked by decoding them with ffprobe and ffmpeg:
# H.264 in yuv420p, the frame count and size asked for, the metadata saying
# what made it, and the frames those kiln writes as PNGs with --frames-dir
# (whose values tests/pipeline/video_pipeline_test.cc checks against
# PyTorch's) up to H.264's loss; the same seed gives the same video, another
# seed another; every mode the same frames; progress lines; bad requests as
# one error line.
#
#   bash tests/cli/video.sh build/kiln
set -euo pipefail
kiln=$(realpath "$1")
tiny="$(cd "$(dirname "${BASH_SOURCE[0]}")/../models/wan-tiny" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/generate_checks.sh"
cd "$tmp"

probe() {  # FILE -> "codec width height pix_fmt frames"
  ffprobe -v error -count_frames -select_streams v:0 \
    -show_entries stream=codec_name,width,height,pix_fmt,nb_read_frames -of csv=p=0 "$1" | tr ',' ' '
}
tag() {  # FILE KEY
  ffprobe -v error -show_entries "format_tags=$2" -of default=nw=1:nk=1 "$1"
}
luma_psnr() {  # A B: ffmpeg's PSNR of the luma over every frame, dB (inf when equal)
  ffmpeg -nostats -i "$1" -i "$2" -lavfi "[0:v]format=yuv444p[a];[1:v]format=yuv444p[b];[a][b]psnr" -f null - 2>&1 |
    sed -n 's/.*PSNR y:\([0-9.inf]*\).*/\1/p' | tail -1
}
at_least() {  # VALUE MIN: VALUE >= MIN (inf counts)
  awk -v v="$1" -v m="$2" 'BEGIN { exit !(v == "inf" || v + 0 >= m) }'
}

t2v=(-m "$tiny/diffusers" -p "A red fox runs through fresh snow in a quiet forest at dawn." --seed 42 --steps 4
     --frames 9 --width 96 --height 64)
"$kiln" generate "${t2v[@]}" -o t2v.mp4 2>progress.txt >out.txt
grep -q "wrote t2v.mp4 (9 frames of 96x64 at 24 fps, 4 steps of unipc, seed 42" out.txt || fail "no summary: $(cat out.txt)"
grep -q "kiln: step 4/4" progress.txt || fail "no step progress: $(cat progress.txt)"
grep -q "kiln: decoded 3/3 latent frames" progress.txt || fail "no decode progress: $(cat progress.txt)"
[[ "$(probe t2v.mp4)" == "h264 96 64 yuv420p 9" ]] || fail "t2v.mp4 is $(probe t2v.mp4), want h264 96x64 yuv420p, 9 frames"
[[ "$(tag t2v.mp4 seed)" == 42 ]] || fail "t2v.mp4's seed tag is '$(tag t2v.mp4 seed)'"
[[ "$(tag t2v.mp4 prompt)" == "A red fox runs through fresh snow in a quiet forest at dawn." ]] || fail "no prompt tag"
tag t2v.mp4 comment | grep -q "Steps: 4, Sampler: unipc, CFG scale: 5, Seed: 42, Size: 96x64, Frames: 9, FPS: 24" ||
  fail "comment tag: $(tag t2v.mp4 comment)"

# The MP4 holds the frames kiln writes as PNGs, up to H.264's loss (on
# these noise-like random-weight pictures about 33 dB of luma PSNR; two
# unrelated videos of them score about 22).
mkdir frames
"$kiln" generate "${t2v[@]}" --frames-dir frames -q
[[ $(ls frames | wc -l) -eq 9 && -f frames/frame_0009.png ]] || fail "--frames-dir wrote: $(ls frames)"
[[ "$(probe frames/frame_0001.png)" == "png 96 64 rgb24 1" ]] || fail "frame_0001.png is $(probe frames/frame_0001.png)"
psnr=$(luma_psnr t2v.mp4 "frames/frame_%04d.png")
at_least "$psnr" 30 || fail "t2v.mp4's frames are not the generated ones (luma PSNR $psnr dB)"

# Same seed, same video; another seed, another.
"$kiln" generate "${t2v[@]}" -o again.mp4 -q
cmp -s t2v.mp4 again.mp4 || fail "the same seed gave a different MP4"
"$kiln" generate "${t2v[@]/42/43}" -o other.mp4 -q
psnr=$(luma_psnr t2v.mp4 other.mp4)
at_least "$psnr" 28 && fail "seed 43 gave (nearly) the same frames as seed 42 (luma PSNR $psnr dB)"

# Every mode makes the same frames (the latents agree to float rounding).
for mode in eager graph auto; do
  "$kiln" generate "${t2v[@]}" --mode "$mode" -o "$mode.mp4" -q
  psnr=$(luma_psnr t2v.mp4 "$mode.mp4")
  at_least "$psnr" 45 || fail "--mode $mode: frames differ from graph-loop's (luma PSNR $psnr dB)"
done

# Image to video from Wan's own folder: its first frame, tagged.
i2v=(-m "$tiny/original" -p "The boat drifts slowly across the lake as the sun rises." --seed 7 --steps 4 --frames 9
     --width 96 --height 64 --image "$tiny/reference/video_i2v/first_frame.png")
"$kiln" generate "${i2v[@]}" -o i2v.mp4 -q
[[ "$(probe i2v.mp4)" == "h264 96 64 yuv420p 9" ]] || fail "i2v.mp4 is $(probe i2v.mp4)"
[[ "$(tag i2v.mp4 first_frame)" == first_frame.png ]] || fail "no first_frame tag"
mkdir i2v_frames
"$kiln" generate "${i2v[@]}" --frames-dir i2v_frames -q
psnr=$(luma_psnr i2v.mp4 "i2v_frames/frame_%04d.png")
at_least "$psnr" 30 || fail "i2v.mp4's frames are not the generated ones (luma PSNR $psnr dB)"
# A first frame of another size is resized to cover the video and centre-cropped.
"$kiln" generate -m "$tiny/diffusers" -p x --seed 1 --steps 1 --frames 5 --width 64 --height 64 \
  --image "$tiny/reference/video_i2v/first_frame.png" -o cropped.mp4 -q
[[ "$(probe cropped.mp4)" == "h264 64 64 yuv420p 5" ]] || fail "cropped.mp4 is $(probe cropped.mp4)"

# The model commands on a Wan folder: its summary; each network built for
# the sizes --dim gives, benched (no heap allocation in a replay), compiled
# and run from its .kplan.
"$kiln" show "$tiny/diffusers" >show.txt
grep -q "transformer: 178,048 parameters" show.txt || fail "kiln show: $(cat show.txt)"
grep -q "UMT5, 2 layers, width 32 = 4 heads x 8" show.txt || fail "kiln show: $(cat show.txt)"
grep -q "48 latent channels, 4x16x16 compression" show.txt || fail "kiln show: $(cat show.txt)"
for c in transformer text_encoder vae_decoder vae_encoder; do
  "$kiln" bench "$tiny/original" --component "$c" --dim height=64 --dim width=64 --iters 2 --warmup 1 --no-peak --json \
    >"bench_$c.json" 2>/dev/null
  grep -qF "\"model\": \"$tiny/original ($c)\"" "bench_$c.json" || fail "bench --component $c: $(cat "bench_$c.json")"
  [[ "${KILN_SANITIZED:-0}" == 1 ]] || grep -qF '"replay_heap_allocations": 0' "bench_$c.json" ||
    fail "bench --component $c allocates in a replay"
done
"$kiln" compile "$tiny/diffusers" --dim frames=3 --dim height=4 --dim width=6 --dim text_rows=512 -o dit.kplan >/dev/null
"$kiln" run dit.kplan | grep -q "sample: f32\[2,48,3,4,6\]" || fail "kiln run dit.kplan: $("$kiln" run dit.kplan)"
set +e
"$kiln" bench "$tiny/diffusers" --dim wrong=3 2>err.txt
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "\-\-dim wrong: not a size of" err.txt || fail "--dim wrong: $(cat err.txt)"

expect_error "--frames must be 4k+1" -m "$tiny/diffusers" -p x --frames 6
expect_error "--width must be a multiple of 32" -m "$tiny/diffusers" -p x --frames 5 --width 50
expect_error "a video takes one --prompt" -m "$tiny/diffusers" -p x -p y --frames 5
expect_error "--frames-dir nowhere: no such folder" -m "$tiny/diffusers" -p x --frames 5 --width 64 --height 64 \
  --frames-dir nowhere
expect_error "--image is for video models" -p x --image "$tiny/reference/video_i2v/first_frame.png"
[[ ! -e out.mp4 ]] || fail "a refused request left out.mp4 behind"
echo "video: all checks passed"
