#!/usr/bin/env python3
# A word-level token corpus from a text file, for token-level GPT runs (data.dataset=tokens):
# GPT-2-style pieces (" word", " 123", " ;", whitespace), the V-1 most frequent kept, the rest one id.
"""Usage: python3 bench/python/word_tokens.py (IN.txt | --kjv) OUT.bin [--vocab 8192]

Writes OUT.bin (headerless little-endian uint16 ids, what `data.dataset=tokens data.path=OUT.bin
model.vocab_size=V` reads) and OUT.bin.vocab (one piece per line, by id, repr-escaped). Ids are by
frequency, ties by the piece itself, so the same text always gives the same file. The last id,
V - 1, stands for every piece outside the V - 1 most frequent. No tokenizer model is downloaded:
the pieces are GPT-2's pre-tokenization pattern without its byte-pair merges, which on a text like
the King James Bible (a ~13k-word vocabulary) gives word-level tokens with few unknowns. `--kjv`
reads the King James Bible as the C++ data layer does (src/data/kjv.cpp): its cached kjv.txt, or
Debian's `bible -f` with the verse references stripped."""
import argparse
import array
import collections
import os
import re
import subprocess
import sys

# GPT-2's pre-tokenizer (contractions, an optional space then letters / digits / other symbols,
# whitespace runs), written for Python's re, which has no \p{L}: [^\W\d_] is a letter, and "_" - a
# \w character that is neither letter nor digit - goes with the other symbols, as in GPT-2.
PIECE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")


def kjv_text():
    """The text src/data/kjv.cpp caches: one verse per line, its reference ("Ge1:1") stripped."""
    cache = os.environ.get("HT_DATA_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", "/root"), ".cache"), "hybrid-trainer")
    path = os.path.join(cache, "kjv.txt")
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        return open(path, encoding="utf-8").read()
    try:
        out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"cannot run `bible` ({e}); install it with: apt-get install bible-kjv bible-kjv-text")
    verses = [line.split(" ", 1)[1] for line in out.splitlines() if " " in line]
    if len(verses) != 31102:
        sys.exit(f"`bible -f` printed {len(verses)} verses, expected 31102 (Genesis 1:1 to Revelation 22:21)")
    return "".join(v + "\n" for v in verses)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs", nargs="+", metavar="IN.txt OUT.bin")
    ap.add_argument("--kjv", action="store_true", help="the King James Bible instead of IN.txt")
    ap.add_argument("--vocab", type=int, default=8192)
    a = ap.parse_args()
    if len(a.inputs) != (1 if a.kjv else 2):
        sys.exit("usage: word_tokens.py (IN.txt | --kjv) OUT.bin [--vocab V]")
    a.out = a.inputs[-1]
    a.text = "the King James Bible" if a.kjv else a.inputs[0]
    if not 2 <= a.vocab <= 65536:
        sys.exit(f"--vocab {a.vocab}: must be in [2, 65536] (ids are uint16)")
    try:
        text = kjv_text() if a.kjv else open(a.text, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"cannot read {a.text} as UTF-8 text: {e}")
    if not text:
        sys.exit(f"{a.text} is empty: nothing to tokenize")
    pieces = PIECE.findall(text)
    if "".join(pieces) != text:
        sys.exit("internal error: the pieces do not cover the text")
    counts = collections.Counter(pieces)
    kept = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: a.vocab - 1]
    ids = {p: i for i, (p, _) in enumerate(kept)}
    unk = a.vocab - 1
    tokens = array.array("H", (ids.get(p, unk) for p in pieces))  # uint16
    unknown = tokens.count(unk)
    if sys.byteorder == "big":
        tokens.byteswap()  # the file is little-endian
    # Each file under a temporary name, then renamed: two benchmarks making the same corpus at once
    # (RECORD_V2_JOBS=2) each write a whole file and never read a half-written one.
    tmp = f".tmp.{os.getpid()}"
    with open(a.out + ".vocab" + tmp, "w", encoding="utf-8") as f:
        for p, _ in kept:
            f.write(repr(p) + "\n")
        f.write("'<unknown>'\n")
    os.replace(a.out + ".vocab" + tmp, a.out + ".vocab")
    with open(a.out + tmp, "wb") as f:
        tokens.tofile(f)
    os.replace(a.out + tmp, a.out)
    print(f"{a.text}: {len(text)} characters, {len(pieces)} tokens, {len(counts)} distinct pieces; "
          f"vocab {a.vocab}: {unknown} tokens ({100.0 * unknown / len(pieces):.2f} %) unknown "
          f"-> {a.out}")


if __name__ == "__main__":
    main()
