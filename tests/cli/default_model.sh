#!/usr/bin/env bash
# kiln generate without --model draws with kiln's default model
# (models/shapes); --help lists the vocabulary it knows, a prompt outside it
# gets a warning, several prompts make several images or one --grid, and a
# missing default model or an unquoted prompt is one error line, exit code 2.
#
#   bash tests/cli/default_model.sh build/kiln
set -euo pipefail
kiln=$(realpath "$1")
model="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../models/shapes" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/generate_checks.sh"
cd "$tmp"
unset KILN_DEFAULT_MODEL

# Small enough to commit: at most 25 MB in all.
bytes=$(du -sb "$model" | cut -f1)
(( bytes <= 25 * 1000 * 1000 )) || fail "models/shapes is $bytes bytes, over 25 MB"

"$kiln" generate --prompt "a red circle on a blue background" -o out.png --seed 3 >out.txt 2>err.txt ||
  fail "no --model: $(cat err.txt)"
grep -q "^wrote out.png (64x64, 20 steps of euler, seed 3" out.txt || fail "$(cat out.txt)"
grep -q "warning" err.txt && fail "a prompt in the vocabulary got a warning: $(cat err.txt)"
grep -aq "shapes" out.png || fail "the PNG does not name the model"

"$kiln" generate --help >help.txt
for text in "Default model: .*models/shapes" "COUNT \[SIZE\] COLOUR SHAPE\[s\]" "circle | square | triangle" \
            "red | green | blue | yellow | white | black" "at the top left" "a red circle on a blue background"; do
  grep -q "$text" help.txt || fail "--help lacks '$text'"
done

"$kiln" generate -p "a purple dog on a red background" -o dog.png --steps 2 >/dev/null 2>err.txt
grep -q '^kiln: warning: .*without "purple", "dog"' err.txt || fail "no warning for words outside the vocabulary: $(cat err.txt)"
[[ -s dog.png ]] || fail "a prompt outside the vocabulary made no picture"

# Prompt k draws with seed + k: the second of two prompts is the picture that
# prompt makes alone with the next seed.
"$kiln" generate -p "two green squares" -p "a small yellow triangle at the top left" --seed 7 --steps 4 -o two.png -q
"$kiln" generate -p "a small yellow triangle at the top left" --seed 8 --steps 4 -o alone.png -q
[[ -s two-1.png && -s two-2.png ]] || fail "two prompts did not write two-1.png and two-2.png"
cmp -s two-2.png alone.png || fail "the second prompt's picture is not the one it makes alone with seed + 1"

"$kiln" generate -p "a red circle" -p "two blue squares" -p "three white triangles" --seed 1 --steps 4 --grid 2 \
  -o grid.png >grid.txt 2>/dev/null
grep -q "^wrote grid.png (3 images of 64x64 in a grid" grid.txt || fail "$(cat grid.txt)"
# Two a row, two rows, two pixels between: 130 x 130 (the PNG's IHDR width and height).
[[ $(od -An -tx1 -j16 -N8 grid.png | tr -d ' \n') == 0000008200000082 ]] || fail "the grid is not 130x130"

KILN_DEFAULT_MODEL=nowhere expect_error "kiln's default model is not in nowhere" -p "a red circle"
expect_error "not expected: circle" -p a red circle
expect_error "--grid" -p "a red circle" --grid 0
# A malformed vocabulary.json in a pipeline folder names the file.
cp -r "$model" bad-model
echo '{"grammar": 3}' >bad-model/vocabulary.json
expect_error "bad-model/vocabulary.json: \"grammar\" must be a string" --model bad-model -p "a red circle" -q
echo "default model checks passed"
