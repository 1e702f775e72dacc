#!/usr/bin/env python3
"""Writes runtime/unicode_hf.h: the code points that Hugging Face tokenizers' normalizers leave
as they are although the Unicode standard now normalizes them, so that lockstep's NFC, NFD, NFKC
and NFKD (utf8proc, which follows the standard of its release) give tokenizers' ids.

tokenizers normalizes with the unicode-normalization-alignments crate, whose tables are old
(Unicode 9: U+07FD, NKo, Unicode 11, is not a combining mark to it, and U+32FF, Unicode 12.1, has
no compatibility mapping). To it, a character assigned since is a starter (combining class 0)
with no decomposition that composes with nothing. lockstep cuts the text at such characters,
normalizes the runs between them apart and keeps the characters themselves, which gives exactly
that (see unicode_form in runtime/tokenizer.c). Only the characters whose normalization the
newer standard changes need listing: those with a decomposition, a non-zero combining class, or
a part in a composition that tokenizers does not make.

Requirements (PyPI): pip install "tokenizers>=0.21" unicodedata2
Usage: python3 runtime/make_unicode_hf.py   (run from anywhere; prints what it found)

It also writes tests/fixtures/tokenizer/normal_forms.json, which test_tokenizer holds lockstep's
four forms to: see write_fixture.
"""

import json
import os
import sys
import unicodedata

import tokenizers
import unicodedata2 as U
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "fixtures"))
from tokenizer_reference import apply_patch  # noqa: E402  (variants.json's patch semantics)

FORMS = ("NFC", "NFD", "NFKC", "NFKD")
# the general category classes split patterns name (\p{L}, \p{N}, ...)
CLASSES = ("L", "Lu", "Ll", "Lt", "Lm", "Lo", "N", "Nd", "Nl", "No", "M", "Mn", "Mc", "Me", "P",
           "S", "Z")
# the PCRE2 lockstep links on Debian 12, and its Unicode (= Python 3.11's unicodedata there)
PCRE2_UNICODE = ("10.42", "14.0.0")



def differs(hf, cp):
    c = chr(cp)
    for form in FORMS:
        if hf[form].normalize_str(c) != U.normalize(form, c):
            return True
    ccc = U.combining(c)
    if ccc:
        # a mark tokenizers knows on the other side: the standard reorders the pair
        s = "a" + c + "\u0323" if ccc > 220 else "a\u0301" + c
        if hf["NFD"].normalize_str(s) != U.normalize("NFD", s):
            return True
    return False


def write_fixture(hf, found, decomps):
    """tests/fixtures/tokenizer/normal_forms.json: every character the standard maps (a
    decomposition, a combining class, a composition's first part), 40 to a text, each mark
    between U+0301 and U+0323 after an "a" (reordered by class, composed where it can be), and
    the compositions tokenizers does not make as their pairs; and the ids of variants.json's
    NFC, NFD, NFKC and NFKD tokenizers (SmolLM2's with the normalizer) for each, by tokenizers"""
    chars = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and
             (U.decomposition(chr(cp)) or U.combining(chr(cp)) or cp in found)]
    chars += [0xAC00, 0xAC01, 0xD7A3]  # Hangul syllables: decomposed by rule, not by table
    pieces = ["a\u0301" + chr(cp) + "\u0323" if U.combining(chr(cp)) else chr(cp) for cp in chars]
    for cp in sorted(found):  # the compositions tokenizers does not make, as pairs
        parts = decomps.get(cp)
        if parts and len(parts) == 2:
            pieces.append("".join(map(chr, parts)))
    texts = ["".join(pieces[i:i + 40]) for i in range(0, len(pieces), 40)]
    print(f"{len(chars)} characters, {sum(1 for cp in chars if U.combining(chr(cp)))} marks")
    write_runs("normal_forms.json", texts, ("nfc", "nfd", "nfkc", "nfkd"),
               {"characters": len(chars)})


def write_runs(name, texts, variants, extra):
    """tests/fixtures/tokenizer/NAME: the texts, and the ids of variants.json's tokenizers"""
    fixtures = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "tokenizer")
    with open(os.path.join(fixtures, "variants.json"), encoding="utf-8") as f:
        patches = {v["name"]: v for v in json.load(f)}
    out = {"made_by": "runtime/make_unicode_hf.py", "tokenizers": tokenizers.__version__,
           "unicode": U.unidata_version, **extra, "texts": [{"text": t} for t in texts],
           "variants": {}}
    for vname in variants:
        v = patches[vname]
        with open(os.path.join(fixtures, v["base"], "tokenizer.json"), encoding="utf-8") as f:
            base = json.load(f)
        tok = Tokenizer.from_str(json.dumps(apply_patch(base, v["patch"])))
        out["variants"][vname] = {
            "base": v["base"],
            "rows": [{"ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]}
    path = os.path.join(fixtures, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(texts)} texts")





def main():
    hf = {form: getattr(normalizers, form)() for form in FORMS}
    found = set()
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if (U.decomposition(c) or U.combining(c)) and differs(hf, cp):
            found.add(cp)
    # canonical compositions tokenizers does not make: their first part, a starter new to it,
    # composes with nothing there (the second may be an old mark, as U+0307 in Todhri's)
    decomps = {}
    for cp in range(0x110000):
        d = U.decomposition(chr(cp)) if not 0xD800 <= cp <= 0xDFFF else ""
        if d and not d.startswith("<"):
            decomps[cp] = [int(x, 16) for x in d.split()]
    firsts = set()
    for cp in sorted(found):
        parts = decomps.get(cp)
        if parts and len(parts) == 2:
            pair = "".join(map(chr, parts))
            if hf["NFC"].normalize_str(pair) != U.normalize("NFC", pair):
                firsts.add(parts[0])
    for first in sorted(firsts):
        if U.combining(chr(first)):
            raise SystemExit(f"U+{first:04X}: a first part with a combining class")
        for cp, parts in decomps.items():  # tokenizers must compose nothing with it
            pair = "".join(map(chr, parts))
            if parts[0] == first and hf["NFC"].normalize_str(pair) == chr(cp):
                raise SystemExit(f"U+{first:04X}: tokenizers composes it into U+{cp:04X}")
    found |= firsts
    # and never a character tokenizers normalizes as the standard does
    for cp in sorted(found):
        for form in FORMS:
            got = hf[form].normalize_str(chr(cp))
            if got != chr(cp) and got == U.normalize(form, chr(cp)):
                raise SystemExit(f"U+{cp:04X}: tokenizers normalizes it ({form}); not opaque")
    write_fixture(hf, found, decomps)
    adds, kept_out = class_adds()
    write_class_fixture(adds)
    path = os.path.join(HERE, "unicode_hf.h")
    with open(path, "w") as f:
        f.write(
            "/* Generated by runtime/make_unicode_hf.py from tokenizers "
            f"{tokenizers.__version__}, the Unicode {U.unidata_version}\n"
            " * data of unicodedata2 and Python's unicodedata "
            f"{unicodedata.unidata_version} (the Unicode of PCRE2 {PCRE2_UNICODE[0]}):\n"
            " * do not edit. */\n"
            "#ifndef LOCKSTEP_UNICODE_HF_H\n#define LOCKSTEP_UNICODE_HF_H\n\n#include <stdint.h>\n\n")
        rs = ranges_of(found)
        f.write(
            "/* The code points tokenizers' normalizers leave as they are (a starter with no\n"
            " * decomposition that composes with nothing) where the standard normalizes them:\n"
            f" * {len(found)} in {len(rs)} ranges, first and last, one a line. */\n"
            "/* clang-format off */\n"
            "static const uint32_t unicode_hf_opaque[][2] = {\n")
        for lo, hi in rs:
            f.write(f"    {{0x{lo:04X}, 0x{hi:04X}}},\n")
        f.write("};\n/* clang-format on */\n\n")
        n = sum(len(v) for v in adds.values())
        rows = [(k, lo, hi) for k in CLASSES for lo, hi in ranges_of(adds[k])]
        f.write(
            "/* The code points tokenizers' regexes count in a general category class (\\p{L}, ...)\n"
            f" * and PCRE2 {PCRE2_UNICODE[0]}'s Unicode {PCRE2_UNICODE[1]} tables do not "
            "(assigned since, or moved):\n"
            f" * {n} in {len(rows)} ranges, by class. The other way, in PCRE2's class and not "
            "in tokenizers',\n"
            f" * {', '.join(kept_out) or 'none'}: not listed, adding cannot mend it. */\n"
            "/* clang-format off */\n"
            "static const struct {\n    char name[3];\n    uint32_t lo, hi;\n"
            "} unicode_hf_class_adds[] = {\n")
        for k, lo, hi in rows:
            f.write(f"    {{\"{k}\", 0x{lo:04X}, 0x{hi:04X}}},\n")
        f.write("};\n/* clang-format on */\n\n#endif\n")
    print(f"wrote {path}: {len(found)} code points kept, {n} class members added "
          f"(tokenizers {tokenizers.__version__}, Unicode {U.unidata_version})")


def ranges_of(cps):
    out = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def class_adds():
    """for each general category class a pattern may name, the code points tokenizers' regex
    engine puts in it and Python's unicodedata (PCRE2's Unicode) does not; and the ones it
    leaves out that the older tables put in"""
    if unicodedata.unidata_version != PCRE2_UNICODE[1]:
        raise SystemExit(f"Python's unicodedata is {unicodedata.unidata_version}; the tables "
                         f"must be PCRE2 {PCRE2_UNICODE[0]}'s ({PCRE2_UNICODE[1]})")
    cands = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and
             unicodedata.category(chr(cp)) != U.category(chr(cp))]
    adds, kept_out = {}, []
    for k in CLASSES:
        split = pre_tokenizers.Split(Regex("\\p{%s}" % k), behavior="removed")
        adds[k] = []
        for cp in cands:
            hf_in = split.pre_tokenize_str(chr(cp)) == []
            old_in = unicodedata.category(chr(cp)).startswith(k)
            if hf_in and not old_in:
                adds[k].append(cp)
            elif old_in and not hf_in:
                kept_out.append(f"U+{cp:04X} in \\p{{{k}}}")
    return adds, kept_out


def write_class_fixture(adds):
    """tests/fixtures/tokenizer/regex_classes.json: the first, middle and last code point of
    each range added to a class, before a contraction ("'s": a letter or number before it ends
    there, an unassigned character takes the apostrophe into a punctuation run), after a letter
    and a digit, 40 to a text; and the ids of the GPT-2, Llama 3 and Qwen2 splits
    (variants.json)"""
    cps = sorted(set(x for v in adds.values() for lo, hi in ranges_of(v)
                     for x in (lo, (lo + hi) // 2, hi)))
    pieces = [f" {chr(cp)}'s x{chr(cp)}'t 1{chr(cp)}'ll {chr(cp)}!" for cp in cps]
    texts = ["".join(pieces[i:i + 40]) for i in range(0, len(pieces), 40)]
    write_runs("regex_classes.json", texts, ("gpt2_prefix_space", "llama3_split", "qwen2_split"),
               {"code_points": len(cps)})

if __name__ == "__main__":
    main()
