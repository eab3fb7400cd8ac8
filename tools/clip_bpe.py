#!/usr/bin/env python3
"""CLIP's byte-level BPE tokenizer, as Hugging Face's (slow) CLIPTokenizer
applies it when ftfy is not installed, and a small trainer that writes a
tokenizer folder in CLIP's file format. This is the reference kiln's C++
tokenizer (src/pipeline/clip_tokenizer.h) is tested against.

    /usr/bin/python3 tools/clip_bpe.py make-test-data tests/data/tokenizer
    /usr/bin/python3 tools/clip_bpe.py write DIR [--merges 400] [--pad-token '!']
    /usr/bin/python3 tools/clip_bpe.py encode DIR 'a photo of a cat'

    import clip_bpe
    clip_bpe.write_tokenizer_dir("tiny-sd/tokenizer")
    tok = clip_bpe.ClipTokenizer("tiny-sd/tokenizer")
    tok.encode("a cat")      # token ids, no BOS/EOS
    tok("a cat", 77)         # [BOS] + ids[:75] + [EOS], padded to 77

Text to ids, in order:
  1. The text is split on the special tokens' contents (BOS, EOS, UNK, PAD;
     leftmost, longest first) as transformers' added-token trie does; each
     one found becomes its id. (SD2 pads with "!", so there every "!" in a
     prompt becomes id 0: diffusers issue #4153.)
  2. Each piece between them: runs of whitespace (the `regex` module's \\s)
     collapse to one space, str.strip(), str.lower().
  3. CLIP's pattern splits it into words (PATTERN, IGNORECASE).
  4. Each word's UTF-8 bytes map to printable characters (bytes_to_unicode),
     "</w>" is appended to its last symbol, and merges apply lowest rank first
     (rank = line order in merges.txt). A word that is exactly
     "<|startoftext|>" or "<|endoftext|>" is not split (CLIP's BPE cache).
  5. Symbols missing from the vocab become the UNK id.

Everything written is deterministic: the same bytes on every run.
"""
import argparse
import json
import os
import sys
import tempfile

import regex

BOS = "<|startoftext|>"
EOS = "<|endoftext|>"
END_OF_WORD = "</w>"
DEFAULT_MAX_LENGTH = 77
DEFAULT_MERGES = 400

PATTERN = regex.compile(
    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
    regex.IGNORECASE)
WHITESPACE = regex.compile(r"\s+")


def bytes_to_unicode():
    """Byte -> printable character: bytes that print stay themselves, the
    rest move to 256 and up, so no BPE symbol is whitespace or a control."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    moved = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + moved)
            moved += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


BYTE_ENCODER = bytes_to_unicode()


def clean_text(text):
    return WHITESPACE.sub(" ", text).strip().lower()


def pre_tokenize(text):
    """The words of one piece of text (no special tokens split out)."""
    return PATTERN.findall(clean_text(text))


def byte_encode(word):
    return "".join(BYTE_ENCODER[b] for b in word.encode("utf-8"))


def merge_pair(symbols, first, second):
    """Every occurrence of (first, second) merged, left to right, as CLIP does."""
    merged = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
            merged.append(first + second)
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


def word_symbols(word):
    return list(word[:-1]) + [word[-1] + END_OF_WORD]


def read_special_token(value, default):
    # Hugging Face writes a special token as a string or as an AddedToken
    # dict ({"content": ..., "lstrip": ...}).
    if value is None:
        return default
    if isinstance(value, dict):
        return value["content"]
    return value


class ClipTokenizer:
    def __init__(self, directory):
        with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        self.decoder = {i: t for t, i in self.encoder.items()}
        with open(os.path.join(directory, "merges.txt"), encoding="utf-8") as f:
            lines = f.read().strip().split("\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        # A later duplicate line wins, as in transformers' dict(zip(merges, ranks)).
        self.bpe_ranks = {tuple(line.split()): rank for rank, line in enumerate(lines) if line.strip()}

        config = self._read_json(directory, "tokenizer_config.json")
        special = {k: config.get(k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        # special_tokens_map.json overrides tokenizer_config.json, as in from_pretrained.
        for k, v in self._read_json(directory, "special_tokens_map.json").items():
            if k in special and v is not None:
                special[k] = v
        self.bos_token = read_special_token(special["bos_token"], BOS)
        self.eos_token = read_special_token(special["eos_token"], EOS)
        self.unk_token = read_special_token(special["unk_token"], EOS)
        self.pad_token = read_special_token(special["pad_token"], EOS)
        self.model_max_length = config.get("model_max_length", DEFAULT_MAX_LENGTH)
        self.bos_id = self.encoder[self.bos_token]
        self.eos_id = self.encoder[self.eos_token]
        self.unk_id = self.encoder[self.unk_token]
        self.pad_id = self.encoder[self.pad_token]
        self.specials = sorted({self.bos_token, self.eos_token, self.unk_token, self.pad_token},
                               key=lambda s: (-len(s), s))

    @staticmethod
    def _read_json(directory, name):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            return {}
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def split_special(self, text):
        """(piece, is_special) pairs: the special tokens found leftmost, longest first."""
        out = []
        start = i = 0
        while i < len(text):
            found = next((s for s in self.specials if text.startswith(s, i)), None)
            if found is None:
                i += 1
                continue
            if start < i:
                out.append((text[start:i], False))
            out.append((found, True))
            i += len(found)
            start = i
        if start < len(text):
            out.append((text[start:], False))
        return out

    def bpe(self, word):
        """The BPE symbols of one byte-encoded word."""
        if word in (BOS, EOS):
            return [word]
        symbols = word_symbols(word)
        while len(symbols) > 1:
            ranked = [(self.bpe_ranks[p], p) for p in zip(symbols, symbols[1:]) if p in self.bpe_ranks]
            if not ranked:
                break
            first, second = min(ranked)[1]
            symbols = merge_pair(symbols, first, second)
        return symbols

    def tokens(self, text):
        """The token strings of `text` (no BOS/EOS)."""
        out = []
        for piece, special in self.split_special(text):
            if special:
                out.append(piece)
                continue
            for word in pre_tokenize(piece):
                out.extend(self.bpe(byte_encode(word)))
        return out

    def encode(self, text):
        """Token ids of `text`, no BOS/EOS, no padding."""
        return [self.encoder.get(t, self.unk_id) for t in self.tokens(text)]

    def __call__(self, text, max_length=None):
        """[BOS] + ids truncated to max_length - 2 + [EOS], padded with PAD to max_length."""
        n = self.model_max_length if max_length is None else max_length
        ids = [self.bos_id] + self.encode(text)[:n - 2] + [self.eos_id]
        return ids + [self.pad_id] * (n - len(ids))


# The trainer's corpus: short English captions of the kind diffusion prompts are.
CAPTIONS = [
    "a photo of a cat", "a photo of a dog", "a painting of a cat sitting on a red chair",
    "a black cat on a white sofa", "a small brown dog running in the park", "a red apple on a wooden table",
    "a green tree in a field", "a blue car parked on the street", "a yellow flower in a glass vase",
    "an orange cat sleeping in the sun", "a purple sky at sunset", "a pink rose with water drops",
    "a white horse running on the beach", "a gray elephant walking in the savanna",
    "a tall giraffe eating leaves", "a lion resting under a tree", "a tiger in the jungle",
    "a bear catching a fish in a river", "a fox in the snow", "a rabbit in a garden",
    "a bird sitting on a branch", "an owl at night", "a penguin on the ice", "a dolphin jumping out of the water",
    "a red square and a blue circle", "a green triangle on a white background", "a yellow star in the sky",
    "a black and white photo of a city", "a city skyline at night", "a street in the rain",
    "a mountain covered in snow", "a lake surrounded by mountains", "a forest in autumn",
    "a beach with palm trees", "a desert with sand dunes", "a waterfall in the forest",
    "a river flowing through a valley", "a small house in the countryside", "a castle on a hill",
    "a bridge over a river", "a lighthouse on the coast", "a boat on the sea", "a ship in a storm",
    "an old man with a beard", "a young woman smiling", "a child playing with a ball",
    "a portrait of a woman in a red dress", "a man riding a bicycle", "a girl reading a book",
    "a boy flying a kite", "a chef cooking in a kitchen", "a cup of coffee on a table",
    "a bowl of fruit", "a slice of pizza", "a plate of pasta", "a chocolate cake with strawberries",
    "a glass of orange juice", "a loaf of bread", "a cat wearing a hat", "a dog wearing sunglasses",
    "an astronaut riding a horse", "an astronaut on the moon", "a robot in a futuristic city",
    "a spaceship in outer space", "a dragon flying over a castle", "a unicorn in a magical forest",
    "a watercolor painting of a garden", "an oil painting of a ship", "a pencil sketch of a face",
    "a digital art of a landscape", "a cartoon of a happy dog", "a drawing of a house",
    "a close up photo of a flower", "a wide angle photo of a canyon", "a high quality photo of a car",
    "a beautiful sunset over the ocean", "a cloudy sky over a green field", "a foggy morning in the woods",
    "a snowy village at night", "a busy market in the city", "a quiet street in the morning",
    "two cats playing together", "three dogs sitting on the grass", "a group of people walking",
    "a red and white striped shirt", "a blue and yellow pattern", "a round table with four chairs",
    "a wooden door in a stone wall", "a window with a view of the sea", "a lamp on a desk",
    "a computer on a desk", "a phone on a table", "a book on a shelf", "a guitar leaning on a wall",
    "a piano in a living room", "a train at the station", "an airplane in the sky",
    "a hot air balloon over the hills", "a bicycle leaning against a tree",
    "a photo of a cat and a dog", "a painting of the sea in the style of van gogh",
]


def train_merges(num_merges, corpus=CAPTIONS):
    """Learns up to `num_merges` merges: each step merges the most frequent
    adjacent pair (ties: the smallest pair in string order). A pair whose
    merge would repeat a token already made is skipped, so ids stay unique."""
    counts = {}
    for caption in corpus:
        for word in pre_tokenize(caption):
            key = tuple(word_symbols(byte_encode(word)))
            counts[key] = counts.get(key, 0) + 1
    words = [[list(w), c] for w, c in sorted(counts.items())]
    known = set(BYTE_ENCODER.values()) | {c + END_OF_WORD for c in BYTE_ENCODER.values()}
    skipped = set()
    merges = []
    while len(merges) < num_merges:
        pairs = {}
        for symbols, count in words:
            for p in zip(symbols, symbols[1:]):
                if p not in skipped:
                    pairs[p] = pairs.get(p, 0) + count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if best[0] + best[1] in known:
            skipped.add(best)
            continue
        known.add(best[0] + best[1])
        merges.append(best)
        for entry in words:
            entry[0] = merge_pair(entry[0], *best)
    return merges


def dump_json(obj):
    # The layout transformers' save_pretrained writes.
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_tokenizer_dir(path, num_merges=DEFAULT_MERGES, pad_token=EOS, max_length=DEFAULT_MAX_LENGTH,
                        corpus=CAPTIONS):
    """Writes vocab.json, merges.txt, special_tokens_map.json and
    tokenizer_config.json of a tokenizer trained on `corpus`. pad_token: EOS
    as SD 1.x, "!" as SD 2.x."""
    merges = train_merges(num_merges, corpus)
    byte_chars = list(BYTE_ENCODER.values())
    tokens = byte_chars + [c + END_OF_WORD for c in byte_chars] + [a + b for a, b in merges] + [BOS, EOS]
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens), "duplicate token"

    def added(content):
        return {"content": content, "lstrip": False, "normalized": True, "rstrip": False, "single_word": False}

    special_map = {"bos_token": added(BOS), "eos_token": added(EOS), "pad_token": pad_token, "unk_token": added(EOS)}
    config = {
        "add_prefix_space": False,
        "bos_token": dict(added(BOS), __type="AddedToken"),
        "do_lower_case": True,
        "eos_token": dict(added(EOS), __type="AddedToken"),
        "errors": "replace",
        "model_max_length": max_length,
        "pad_token": pad_token,
        "tokenizer_class": "CLIPTokenizer",
        "unk_token": dict(added(EOS), __type="AddedToken"),
    }
    os.makedirs(path, exist_ok=True)
    files = {
        "vocab.json": dump_json(vocab),
        "merges.txt": "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
        "special_tokens_map.json": dump_json(special_map),
        "tokenizer_config.json": dump_json(config),
    }
    for name, text in files.items():
        with open(os.path.join(path, name), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)


# ---- test cases -------------------------------------------------------------

CASE_TEXTS = [
    # Empty and blank.
    "", " ", "\n", "\t \n \r",
    # Plain captions, some from the corpus, some not.
    "a photo of a cat", "a photo of a dog", "an astronaut riding a horse", "a red square and a blue circle",
    "a painting of the sea in the style of van gogh", "a beautiful sunset over the ocean",
    "a cyberpunk samurai standing in neon rain", "highly detailed, 8k, trending on artstation",
    "a bowl of ramen with chopsticks", "a medieval knight holding a sword", "portrait of an old fisherman",
    "a cozy cabin in the woods during winter", "the quick brown fox jumps over the lazy dog",
    "an isometric view of a tiny island", "a macro shot of a dewdrop on a leaf", "a teddy bear on a skateboard",
    # Mixed case.
    "A PHOTO OF A CAT", "HeLLo WoRLD", "iPhone and MacBook", "McDonald's", "NASA's Mars Rover", "ThIs Is A tEsT",
    # Punctuation runs.
    "wow!!!", "hello, world.", "...", "a--b", "(cat)", "\"quoted text\"", "#hashtag @user", "a/b\\c",
    "50% off!", "$100 & more", "::", "!?!?", "<>", "<|", "|>", "<|endoftext", "endoftext|>", "a,b;c:d",
    "[bracket] {brace}", "~tilde~ `backtick`", "a_b_c", "¿qué?", "«guillemets»", "“curly quotes”", "—em dash—",
    # Numbers: every digit is its own word.
    "1234567890", "3.14159", "1,000,000", "2023-01-01", "x2", "4k resolution", "route 66",
    "٣٤٥", "x² + y²", "½ cup", "Ⅻ", "一二三", "①②③", "𝟙𝟚𝟛",
    # Contractions.
    "it's", "we'll", "I'm", "they're", "you've", "he'd", "can't", "don't", "IT'S", "It'S",
    "rock 'n' roll", "'s", "''s", "it’s", "o'clock", "it'ſ", "'ll've", "'", "'x", "cat's toy's",
    # Accented letters.
    "café", "naïve", "Crème Brûlée", "jalapeño", "über", "Ångström", "façade", "résumé", "ÉCOLE",
    "cafe\u0301", "Ñandú", "Dvořák", "Łódź", "Ærøskøbing",
    # Non-Latin scripts.
    "Привет мир", "Кот на крыше", "Καλημέρα κόσμε", "一只猫", "猫が好きです", "고양이", "قطة على السطح",
    "חתול", "बिल्ली", "แมว", "cat 猫 кот γάτα", "Ελληνικά", "ОДИССЕЯ", "ქართული", "Հայերեն",
    # Emoji.
    "🐱", "a cat 🐱", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵", "👍🏽", "❤️", "🔥🔥🔥", "☕", "😀😃", "🧑‍🚀 astronaut",
    "#️⃣", "1️⃣", "a🐱b",
    # Whitespace variants.
    "a\tcat", "a\ncat", "  leading", "trailing  ", "a    b", "a\u00a0cat", "a\u2003cat", "a\u3000cat",
    "a\u200bcat", "a\x1ccat", "\x1c a \x1f", "a\u0085b", "a\u2028b", "a\u180eb", "\u00a0\u00a0", "a\x0bb\x0cc",
    "a \u00a0 \t b", "\ufeffbom",
    # Special tokens written in the text.
    "<|endoftext|>", "a <|endoftext|> b", "<|startoftext|>a cat<|endoftext|>", "<|ENDOFTEXT|>",
    "<|endoftext|><|endoftext|>", "x<|endoftext|>y", "<|ſtartoftext|>", "<<|endoftext|>>", "<|end of text|>",
    "<|startoftext|>", "cat<|startoftext|>", " <|endoftext|> ",
    # Case mappings.
    "Straße", "STRASSE", "ẞ", "İstanbul", "DİYARBAKIR", "ıi", "ΟΔΥΣΣΕΥΣ", "Σ", "ΑΣ", "ΑΣ.", "ΑΣ'Α", "Σ Σ",
    "ΑΣ\u0301", "ʰΣ", "ﬁne ﬂower", "Ǆ ǅ ǆ", "ΐ", "\u0345", "a\u0345b", "!\u0345!", "\u212a Kelvin",
    "\u212b angstrom", "\u2126 ohm", "ΣΑΣ ΣΑΣ", "Ⓐⓑ", "ŉ",
    # Controls and odd code points.
    "\x00", "a\x00b", "\x7f", "\ufffd", "a\u200db", "\ue000", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\uffff", "\U0010ffff",
    "\U00031350",
]

# Characters the generated strings are drawn from: one of each kind above.
POOL = list("aeiostxyzAEST'!?.,- 0123456789<|>") + [
    "\t", "\n", "\u00a0", "\u3000", "\x1c", "\u0085", "\u200b", "\u200d", "\ufe0f", "\u0301", "\u0345",
    "é", "ñ", "ü", "ß", "İ", "ı", "Σ", "σ", "ς", "α", "Ω", "я", "Ж", "猫", "が", "고", "ق", "ि", "²", "½",
    "٣", "🐱", "👍", "🏽", "🇺", "ſ", "ﬁ", "ǅ", "\x00", "\ufffd", "<|endoftext|>", "'s", "'ll",
]

INVALID_UTF8 = [
    b"\xff", b"a\xffb", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf0\x9f\x98cat",
    b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\x80\x80", b"caf\xe9", b"<|endoftext|>\xff",
    b"\xfe\xfe\xff\xff", b"\xe2<|endoftext|>", b"\xf8\x88\x80\x80\x80", b"a\xc3\xa9\xa9",
]

PAD_VARIANT_TEXTS = ["a cat!", "! !! !!!", "wow!!", "hello! world", "what?!", "<|endoftext|>!", "a photo of a dog"]


def generated_texts(count, seed=20240601):
    # A fixed linear congruential generator: the same strings on any Python.
    state = seed
    out = []

    def next_int(n):
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (state >> 33) % n

    words = sorted({w for c in CAPTIONS for w in c.split()})
    for i in range(count):
        if i % 3 == 0:  # caption-like word sequences, some capitalised
            parts = [words[next_int(len(words))] for _ in range(1 + next_int(12))]
            parts = [p.upper() if next_int(5) == 0 else p for p in parts]
            out.append(" ".join(parts))
        else:
            out.append("".join(POOL[next_int(len(POOL))] for _ in range(1 + next_int(24))))
    return out


def make_test_data(path):
    write_tokenizer_dir(path)
    tok = ClipTokenizer(path)
    n = DEFAULT_MAX_LENGTH
    long_texts = ["a photo of a cat " * 30, "supercalifragilistic" * 10, "1234567890" * 10, "🐱" * 40,
                  " ".join(CAPTIONS[:12])]
    texts = CASE_TEXTS + long_texts + generated_texts(90)
    assert len(texts) == len(set(texts)), "duplicate case"

    def case(text):
        return {"text": text, "encoded": tok.encode(text), "ids": tok(text, n)}

    invalid = []
    for raw in INVALID_UTF8:
        c = case(raw.decode("utf-8", errors="replace"))
        invalid.append({"hex": raw.hex(), "encoded": c["encoded"], "ids": c["ids"]})
    with tempfile.TemporaryDirectory() as tmp:
        write_tokenizer_dir(tmp, pad_token="!")
        sd2 = ClipTokenizer(tmp)
        pad_cases = [{"text": t, "encoded": sd2.encode(t), "ids": sd2(t, n)} for t in PAD_VARIANT_TEXTS]

    def lines(items):
        return ",\n".join("    " + json.dumps(x, ensure_ascii=False) for x in items)

    text = (
        "{\n"
        '  "generator": "/usr/bin/python3 tools/clip_bpe.py make-test-data tests/data/tokenizer",\n'
        f'  "max_length": {n},\n'
        '  "cases": [\n' + lines([case(t) for t in texts]) + "\n  ],\n"
        '  "invalid_utf8": [\n' + lines(invalid) + "\n  ],\n"
        '  "pad_token_variant": {"pad_token": "!", "cases": [\n' + lines(pad_cases) + "\n  ]}\n"
        "}\n")
    with open(os.path.join(path, "cases.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    return len(texts), len(invalid), len(pad_cases)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make-test-data", help="tokenizer files and cases.json for the C++ test")
    p.add_argument("dir")
    p = sub.add_parser("write", help="write a tokenizer folder")
    p.add_argument("dir")
    p.add_argument("--merges", type=int, default=DEFAULT_MERGES)
    p.add_argument("--pad-token", default=EOS)
    p = sub.add_parser("encode", help="print the token ids of TEXT")
    p.add_argument("dir")
    p.add_argument("text")
    args = parser.parse_args(argv)
    if args.command == "make-test-data":
        cases, invalid, pad = make_test_data(args.dir)
        print(f"{args.dir}: {cases} cases, {invalid} invalid UTF-8 cases, {pad} pad-token cases")
    elif args.command == "write":
        write_tokenizer_dir(args.dir, args.merges, args.pad_token)
    else:
        tok = ClipTokenizer(args.dir)
        print(" ".join(tok.tokens(args.text)))
        print(tok.encode(args.text))


if __name__ == "__main__":
    main(sys.argv[1:])
