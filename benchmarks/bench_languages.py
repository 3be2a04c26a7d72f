"""Language layer throughput (words, hard negatives, membership, tokens) beside the thesis' port.

Dyck-3 at L = 16 / 128 / 1024, strings in and out on both sides: uniform words
(``Dyck.sample``) vs ``thesis_balanced`` (the library's stream, not re-seeded); hard negatives
in the local (window None) and non-local (window 4) regimes vs ``thesis_unbalanced``; batch
membership (``Dyck.is_member``, half words, half hard negatives) vs ``thesis_is_dyck_word``;
classifier tokenisation (string -> codes -> int64 tokens) vs the thesis' tokenizer (Annex 8.1,
below, without its progress bars). Process CPU time, one thread, median of the repeats; each
repeat times dyckbook and the thesis back to back, so their ratio shares the machine's load.
Writes benchmarks/results/languages.json. ``--scale 0.05`` is a quick run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

import numpy as np
import table
import torch

from dyckbook.data.languages import Dyck
from dyckbook.data.negatives import sample_negatives
from dyckbook.data.thesis import thesis_balanced, thesis_is_dyck_word, thesis_unbalanced
from dyckbook.nn import tokenizer

K = 3
COUNTS = {16: 100_000, 128: 20_000, 1024: 4_000}  # dyckbook strings per timing at --scale 1
THESIS_SHARE = 10  # the thesis' port times a tenth as many strings (rates are per string)
# the project's targets (ratio to the thesis' port)
TARGETS = {"words": {16: 5, 128: 10, 1024: 10}, "negatives": 10, "membership": 20,
           "tokens": {16: 5, 128: 10, 1024: 10}}


def thesis_tokenize(strings: list[str], symbols: str) -> torch.Tensor:
    """The thesis' DyckLanguageTokenizer.tokenize (Annex 8.1), its tqdm bars removed."""
    char_to_token = np.zeros(256, dtype=np.float32)
    for i, char in enumerate(symbols):
        char_to_token[ord(char)] = i + 3
    max_len = max(max(len(s) for s in strings), 1)
    tokenized = np.full((len(strings), max_len + 2), 1, dtype=np.float32)
    tokenized[:, 0] = 0
    lengths = np.array([len(s) for s in strings])
    for i, s in enumerate(strings):
        tokenized[i, 1:lengths[i] + 1] = char_to_token[[ord(c) for c in s]]
    tokenized[np.arange(len(strings)), lengths + 1] = 2
    return torch.from_numpy(tokenized)


def cpu_seconds(fn: Callable[[], object]) -> float:
    """Process CPU seconds of one call."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(ours: Callable[[], object], theirs: Callable[[], object], n: int, m: int,
            repeats: int) -> dict[str, float]:
    """Median strings per CPU-second of ``ours`` (n strings) and ``theirs`` (m strings)."""
    ours()  # warm-up: caches (negatives' availability probes), allocator
    times = [(cpu_seconds(ours), cpu_seconds(theirs)) for _ in range(repeats)]
    return {"dyckbook": n / statistics.median(t for t, _ in times),
            "thesis": m / statistics.median(t for _, t in times),
            "load_average_1min": round(os.getloadavg()[0], 2)}


def bench_length(lang: Dyck, length: int, n: int, repeats: int, seed: int) -> dict[str, dict]:
    """Every measure at one length: ``{measure: {dyckbook, thesis, load_average_1min}}``."""
    rng, r = np.random.default_rng(seed), random.Random(seed)
    m = max(20, n // THESIS_SHARE)
    lengths = np.full(n, length)

    def unbalanced() -> list[str]:
        return [thesis_unbalanced(K, length) for _ in range(m)]

    out = {
        "words": measure(lambda: lang.sample(rng, lengths),
                         lambda: [thesis_balanced(K, length, rng=r) for _ in range(m)],
                         n, m, repeats),
        "negatives_local": measure(
            lambda: lang.alphabet.decode(*sample_negatives(lang, rng, lengths, window=None)[:2]),
            unbalanced, n, m, repeats),
        "negatives_window_4": measure(
            lambda: lang.alphabet.decode(*sample_negatives(lang, rng, lengths, window=4)[:2]),
            unbalanced, n, m, repeats),
    }
    half = n // 2
    words = lang.sample(rng, lengths[:half])
    negatives = sample_negatives(lang, rng, lengths[half:], window=None)
    mixed = words + lang.alphabet.decode(*negatives[:2])
    few = mixed[:m // 2] + mixed[-(m - m // 2):]
    out["membership"] = measure(lambda: lang.is_member(mixed),
                                lambda: [thesis_is_dyck_word(s, K) for s in few], n, m, repeats)
    ours = tokenizer.encode(*lang.alphabet.encode(mixed))
    if not torch.equal(thesis_tokenize(mixed, lang.alphabet.symbols).long(), ours):
        raise RuntimeError(f"the thesis' tokenizer and dyckbook's disagree at length {length}")
    out["tokens"] = measure(lambda: tokenizer.encode(*lang.alphabet.encode(mixed)),
                            lambda: thesis_tokenize(few, lang.alphabet.symbols), n, m, repeats)
    codes, lens = lang.alphabet.encode(mixed)  # raw only: what the package itself passes around
    out["words_as_codes"] = {"dyckbook": n / cpu_seconds(lambda: lang.sample_codes(rng, lengths))}
    member = n / cpu_seconds(lambda: lang.is_member((codes, lens)))
    out["membership_of_codes"] = {"dyckbook": member}
    return out


def rows_of(length: int, m: dict[str, dict]) -> list[dict]:
    """The table rows of one length."""
    name = f"languages, L = {length}"

    def one(key: str, measure: str, reference: str, target: int) -> dict:
        return table.row(name, f"{measure} vs {reference}", m[key]["dyckbook"],
                         m[key]["thesis"], f"≥ {target}×")

    return [
        one("words", "uniform Dyck-3 words/s", "`thesis_balanced`", TARGETS["words"][length]),
        one("negatives_local", "hard negatives/s, window None", "`thesis_unbalanced`",
            TARGETS["negatives"]),
        one("negatives_window_4", "hard negatives/s, window 4", "`thesis_unbalanced`",
            TARGETS["negatives"]),
        one("membership", "membership checks/s (batch)", "`thesis_is_dyck_word`",
            TARGETS["membership"]),
        one("tokens", "strings tokenised/s", "the thesis' tokenizer", TARGETS["tokens"][length]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of the full string counts (0.05: a quick run)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per measure (median)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 0 < args.scale <= 1:
        parser.error(f"--scale must be in (0, 1], got {args.scale}")
    torch.set_num_threads(1)
    load = os.getloadavg()
    lang = Dyck(K)
    raw, rows = {}, []
    for length, count in COUNTS.items():
        n = max(200, int(count * args.scale))
        m = bench_length(lang, length, n, args.repeats, args.seed)
        raw[str(length)] = {"n": n, **m}
        rows += rows_of(length, m)
        print(f"L = {length}: " + ", ".join(
            f"{k} {v['dyckbook']:,.0f}/s" + (f" ({v['dyckbook'] / v['thesis']:.1f}x)"
                                             if "thesis" in v else "")
            for k, v in m.items()), flush=True)
    path = table.save("languages", rows, {"k": K, "repeats": args.repeats,
                                          "thesis_share": THESIS_SHARE, "lengths": raw},
                      load, "full" if args.scale == 1 else "small")
    print(f"load average at start {load}; wrote {path}")


if __name__ == "__main__":
    main()
