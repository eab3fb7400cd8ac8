#!/usr/bin/env python3
"""Make tests/data/sentencepiece: two more SentencePiece unigram models than
the tiny Wan one (tools/wan/text.py), trained by spm_train on the same
corpus with the options T5-family files differ in, and what the
sentencepiece library encodes a few hundred texts to with each: the oracle
for kiln's own encoder (src/pipeline/sentencepiece.h).

    /usr/bin/python3 tools/make_sentencepiece_cases.py [--out tests/data/sentencepiece] [--count 300]

    bytes.model     nmt_nfkc, byte_fallback (unknown characters as <0xXX> pieces), user-defined
                    symbols "<cat>" and "Wan" (never split, never normalized)
    identity.model  identity normalizer, no dummy prefix, extra whitespace kept
    cases.json      {"texts": [...], "ids": {"bytes": [[...]], "identity": [[...]], "wan": [[...]]}}
                    ("wan": tests/models/wan-tiny/diffusers/tokenizer/spiece.model)

Texts: corpus lines cut and spliced at random, with accents, CJK, emoji,
fullwidth and ligature characters, control and odd whitespace, repeated
spaces, digits, and malformed UTF-8 left out (kiln's prompts are valid
UTF-8 by then). Deterministic: a fixed seed, one spm_train thread.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import sentencepiece

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wan.text import CORPUS  # noqa: E402

EXTRA = ["é", "ü", "ß", "東京", "日本語", "🙂", "🐈", "ＡＢＣ", "ﬁ", "①", "\u00a0", "\u3000", "\t", "  ", "\u200b",
         "<cat>", "Wan", "wan", "42", "3.14", "…", "—", "\u0301", "ǅ", "Ω", "x\u0308", "\ufb01sh"]


def train(tmp, name, extra_flags):
    subprocess.run(["spm_train", "--input=corpus.txt", f"--model_prefix={name}", "--model_type=unigram",
                    "--vocab_size=300", "--pad_id=0", "--eos_id=1", "--unk_id=2", "--bos_id=-1",
                    "--character_coverage=0.98", "--num_threads=1", "--input_sentence_size=0",
                    "--shuffle_input_sentence=false", "--minloglevel=2"] + extra_flags,
                   cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return os.path.join(tmp, name + ".model")


def random_text(rng):
    lines = CORPUS.strip().split("\n")
    parts = []
    for _ in range(rng.randint(1, 4)):
        line = rng.choice(lines)
        a = rng.randint(0, len(line))
        b = rng.randint(a, len(line))
        parts.append(line[a:b])
        if rng.random() < 0.6:
            parts.append(rng.choice(EXTRA))
    return rng.choice(["", " ", "  "]) + "".join(parts) + rng.choice(["", " ", "\n"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "sentencepiece"))
    ap.add_argument("--count", type=int, default=300)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="spm_cases_")
    try:
        with open(os.path.join(tmp, "corpus.txt"), "w", encoding="utf-8") as f:
            f.write(CORPUS)
        models = {
            "bytes": train(tmp, "bytes", ["--byte_fallback=true", "--user_defined_symbols=<cat>,Wan"]),
            "identity": train(tmp, "identity", ["--normalization_rule_name=identity", "--add_dummy_prefix=false",
                                                "--remove_extra_whitespaces=false"]),
        }
        os.makedirs(args.out, exist_ok=True)
        for name, path in models.items():
            shutil.copyfile(path, os.path.join(args.out, name + ".model"))
        wan = os.path.join(os.path.dirname(__file__), "..", "tests", "models", "wan-tiny", "diffusers", "tokenizer",
                           "spiece.model")
        models["wan"] = wan
        rng = random.Random(2026)
        texts = [random_text(rng) for _ in range(args.count)] + ["", " ", "Wan<cat>Wan", "a  b   c", "🙂🙂🙂"]
        ids = {}
        for name, path in models.items():
            sp = sentencepiece.SentencePieceProcessor(model_file=path)
            ids[name] = [sp.encode(t, out_type=int) for t in texts]
        with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
            json.dump({"texts": texts, "ids": ids}, f, ensure_ascii=False)
        print(f"{args.out}: {len(texts)} texts, models {', '.join(models)}")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
