"""Tests for dyckbook.data: specs, generation, compact storage, splits, batching, JSONL and cache."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dyckbook.data import (
    THESIS_SPLIT,
    BatchSampler,
    DatasetSpec,
    DyckDataset,
    LengthBucketSampler,
    cache_path,
    collate,
    generate_dataset,
    load_jsonl,
    load_or_generate,
    make_loader,
    save_jsonl,
    split_by_length,
    split_dataset,
    split_indices,
)
from dyckbook.languages import Dyck, ShuffleDyck
from dyckbook.tokenizer import END, PAD, START, DyckTokenizer
from reference_checker import is_dyck, is_shuffle_dyck


# ----------------------------------------------------------------------------- oracles


# The independent membership oracle shared by the language, negative and data tests.
stack_member = is_dyck
shuffle_member = is_shuffle_dyck


def max_prefix_depth(s: str, openers: str) -> int:
    height = best = 0
    for c in s:
        height += 1 if c in openers else -1
        best = max(best, height)
    return best


SMALL = DatasetSpec(language="dyck", k=2, n=600, min_length=0, max_length=14, seed=7)


@pytest.fixture(scope="module")
def small() -> DyckDataset:
    return generate_dataset(SMALL)


# ----------------------------------------------------------------------------- DatasetSpec


@pytest.mark.parametrize("changes, match", [
    ({"language": "dyck1"}, "language must be one of"),
    ({"k": 0}, "k must be >= 1"),
    ({"k": 2.0}, "k must be an int"),
    ({"language": "shuffle_dyck", "max_depth": 3}, "max_depth applies to language='dyck' only"),
    ({"max_depth": 0}, "max_depth must be >= 1"),
    ({"n": 0}, "n must be >= 1"),
    ({"min_length": -2}, "min_length must be >= 0"),
    ({"min_length": 10, "max_length": 8}, "min_length must be <= max_length"),
    ({"min_length": 3, "max_length": 3}, "holds no even length"),
    ({"positive_fraction": 1.5}, r"positive_fraction must lie in \[0, 1\]"),
    ({"positive_fraction": True}, "positive_fraction must be a number"),
    ({"negatives": "easy"}, "negatives must be one of"),
    ({"negatives": ("no_such_kind",)}, "'no_such_kind', which is not a negative kind"),
    ({"negatives": ()}, "non-empty tuple"),
    ({"short_lengths": "pad"}, "short_lengths must be one of"),
    ({"seed": -1}, "seed must be >= 0"),
    ({"pairs": ("()",)}, "pairs"),
])
def test_spec_rejects_bad_values(changes, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(SMALL, **changes)


def test_spec_dict_round_trip_through_json():
    spec = DatasetSpec(language="dyck", k=3, max_depth=4, pairs=["()", "[]", "{}"], n=10,
                       min_length=2, max_length=20, positive_fraction=0.25,
                       negatives="random", short_lengths="keep", seed=5)
    assert spec.pairs == ("()", "[]", "{}")
    again = DatasetSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.spec_hash() == spec.spec_hash()
    with pytest.raises(ValueError, match="unknown DatasetSpec field"):
        DatasetSpec.from_dict({**spec.to_dict(), "min_len": 3})


def test_single_kind_name_becomes_a_tuple():
    from dyckbook.negatives import HARD_KINDS

    spec = dataclasses.replace(SMALL, negatives=HARD_KINDS[0])
    assert spec.negatives == (HARD_KINDS[0],)
    assert set(generate_dataset(spec).kinds) == {"positive", HARD_KINDS[0]}


def test_spec_hash_covers_every_parameter():
    base = DatasetSpec(language="dyck", k=2, n=100, min_length=0, max_length=16, seed=0)
    variants = {
        "language": "shuffle_dyck", "k": 3, "max_depth": 5, "pairs": ("<>", "()"), "n": 101,
        "min_length": 2, "max_length": 18, "positive_fraction": 0.4, "negatives": "random",
        "short_lengths": "keep", "seed": 1,
    }
    assert set(variants) == {f.name for f in dataclasses.fields(DatasetSpec)}
    hashes = {base.spec_hash()}
    for name, value in variants.items():
        hashes.add(dataclasses.replace(base, **{name: value}).spec_hash())
    assert len(hashes) == len(variants) + 1
    assert cache_path(base, "c") != cache_path(dataclasses.replace(base, min_length=2), "c")


# ----------------------------------------------------------------------------- generation


def test_same_spec_same_bytes(small):
    again = generate_dataset(SMALL)
    assert again.strings() == small.strings()
    for name in ("labels", "lengths", "depths", "kind_codes"):
        np.testing.assert_array_equal(getattr(again, name), getattr(small, name))
    assert again.kind_names == small.kind_names
    other = generate_dataset(dataclasses.replace(SMALL, seed=8))
    assert other.strings() != small.strings()


def test_labels_agree_with_an_independent_checker(small):
    pairs = small.language.pairs
    strings, labels, kinds = small.strings(), small.labels.tolist(), small.kinds
    assert len(strings) == SMALL.n
    for s, label, kind in zip(strings, labels, kinds):
        assert stack_member(s, pairs) == bool(label), s
        assert (kind == "positive") == bool(label)


def test_counts_and_length_range(small):
    assert int(small.labels.sum()) == SMALL.n_positive == 300
    assert small.lengths.min() >= SMALL.min_length and small.lengths.max() <= SMALL.max_length
    assert (small.lengths % 2 == 0).all()


def test_length_matched_under_drop(small):
    per_length = Counter(zip(small.lengths.tolist(), small.labels.tolist()))
    lengths = {length for length, _ in per_length}
    for length in lengths:
        assert per_length[(length, 0)] == per_length[(length, 1)], length
    # No hard negative exists below length 4: those lengths are dropped for both classes.
    assert min(lengths) >= 4


def test_hard_negatives_cannot_be_counted_away(small):
    pairs = small.language.pairs
    for s, label in zip(small.strings(), small.labels.tolist()):
        if label:
            continue
        assert s[0] in small.language.openers
        for opener, closer in pairs:
            assert s.count(opener) == s.count(closer), s


def test_keep_short_lengths_keeps_unpaired_positives():
    spec = dataclasses.replace(SMALL, short_lengths="keep", n=800)
    data = generate_dataset(spec)
    per_length = Counter(zip(data.lengths.tolist(), data.labels.tolist()))
    assert per_length[(0, 1)] > 0 and per_length[(2, 1)] > 0
    assert per_length[(0, 0)] == 0 and per_length[(2, 0)] == 0
    assert int(data.labels.sum()) == 400 and len(data) == 800


@pytest.mark.parametrize("fraction, n_pos", [(0.25, 100), (1.0, 400), (0.0, 0)])
def test_positive_fraction(fraction, n_pos):
    data = generate_dataset(dataclasses.replace(SMALL, n=400, positive_fraction=fraction))
    assert int(data.labels.sum()) == n_pos and len(data) == 400


def test_random_negatives_and_depth_bound():
    spec = DatasetSpec(language="dyck", k=1, max_depth=2, n=300, min_length=0, max_length=12,
                       negatives="random", seed=3)
    data = generate_dataset(spec)
    for s, label in zip(data.strings(), data.labels.tolist()):
        assert stack_member(s, ("()",), max_depth=2) == bool(label)
    assert set(data.kinds) - {"positive"}  # some negative kind is recorded


def test_shuffle_dyck_labels():
    spec = DatasetSpec(language="shuffle_dyck", k=2, n=300, min_length=0, max_length=12, seed=4)
    data = generate_dataset(spec)
    assert isinstance(data.language, ShuffleDyck)
    for s, label in zip(data.strings(), data.labels.tolist()):
        assert shuffle_member(s, data.language.pairs) == bool(label)


def test_no_negative_at_any_length_is_a_clear_error():
    with pytest.raises(ValueError, match="no negative of kinds"):
        generate_dataset(DatasetSpec(k=1, n=10, min_length=0, max_length=2))


# ----------------------------------------------------------------------------- storage


def test_items_and_accessors(small):
    strings = small.strings()
    item = small[3]
    assert set(item) == {"index", "codes", "string", "label", "kind", "length", "depth"}
    assert item["string"] == strings[3] == small.string(3)
    assert item["length"] == len(item["string"]) == len(item["codes"])
    assert item["depth"] == max_prefix_depth(item["string"], small.language.openers)
    assert small[-1]["string"] == strings[-1]
    with pytest.raises(IndexError):
        small[len(small)]
    depths = [max_prefix_depth(s, small.language.openers) for s in strings]
    assert small.depths.tolist() == depths
    assert sum(small.kind_counts().values()) == len(small)


def test_subset_shares_storage(small):
    idx = np.array([5, 1, 9])
    sub = small.subset(idx)
    assert sub.strings() == [small.string(i) for i in idx]
    assert sub.labels.tolist() == small.labels[idx].tolist()
    assert sub._buffer is small._buffer


def test_memory_is_about_half_a_byte_per_character():
    spec = DatasetSpec(k=3, n=2000, min_length=0, max_length=512, seed=2)
    data = generate_dataset(spec)
    total = int(data.lengths.sum())
    per_string = 8 + 4 + 1 + 1 + 2  # start, length, label, kind, depth
    # Generation chunks start on byte boundaries: at most a spare nibble per chunk.
    assert (total + 1) // 2 <= data._buffer.nbytes <= total // 2 + 16
    assert data.nbytes == data._buffer.nbytes + per_string * len(data)
    assert data.nbytes < 0.51 * total + 20 * len(data)


@settings(max_examples=25, deadline=None)
@given(strings=st.lists(st.text(alphabet="()[]", max_size=30), min_size=1, max_size=30))
def test_from_strings_round_trip(strings):
    language = Dyck(2)
    labels = np.array([stack_member(s, language.pairs) for s in strings], dtype=int)
    data = DyckDataset.from_strings(strings, labels, language)
    assert data.strings() == strings
    assert data.labels.tolist() == labels.tolist()
    assert [data.string(i) for i in range(len(strings))] == strings


def test_unpacked_storage_for_large_alphabets():
    pairs = tuple(chr(0x41 + 2 * i) + chr(0x42 + 2 * i) for i in range(9))  # 18 symbols
    language = Dyck(9, pairs=pairs)
    strings = ["AB", "CDEF", "", "QRAB", "BA"]
    data = DyckDataset.from_strings(strings, language.is_member_batch(strings), language)
    assert not data.packed and data.strings() == strings


def test_from_strings_errors():
    language = Dyck(1)
    with pytest.raises(ValueError, match=r"strings\[1\] has character 'x'"):
        DyckDataset.from_strings(["()", "(x"], [1, 0], language)
    with pytest.raises(ValueError, match=r"labels\[1\] must be 0 or 1"):
        DyckDataset.from_strings(["()", "(("], [1, 2], language)


# ----------------------------------------------------------------------------- splits


def strings_of(part: DyckDataset) -> set[str]:
    return set(part.strings())


@pytest.mark.parametrize("fractions", [THESIS_SPLIT, (0.5, 0.5), (0.8, 0.1, 0.1)])
def test_split_disjoint_covering_and_sized(small, fractions):
    parts = split_indices(small, fractions, rng=np.random.default_rng(0))
    joined = np.sort(np.concatenate(parts))
    np.testing.assert_array_equal(joined, np.arange(len(small)))
    sets = [set(small.strings(p)) for p in parts]
    for a in range(len(sets)):
        for b in range(a + 1, len(sets)):
            assert not sets[a] & sets[b]
    targets = np.asarray(fractions) * len(small)
    # Duplicates must travel together, so sizes can miss by at most a duplicate group.
    biggest_group = max(Counter(small.strings()).values())
    assert np.all(np.abs([len(p) for p in parts] - targets) <= biggest_group + 1)


def test_split_with_many_duplicates_stays_disjoint():
    # Dyck-1 strings of length <= 6 have few distinct values: heavy duplication.
    data = generate_dataset(DatasetSpec(k=1, n=500, min_length=4, max_length=6, seed=1))
    assert len(set(data.strings())) < len(data) / 5
    train, val, test = split_dataset(data, rng=3)
    assert len(train) + len(val) + len(test) == len(data)
    assert not strings_of(train) & strings_of(val)
    assert not strings_of(train) & strings_of(test)
    assert not strings_of(val) & strings_of(test)


def test_split_is_deterministic_and_validated(small):
    a = split_indices(small, rng=5)
    b = split_indices(small, rng=np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="sum to 1"):
        split_indices(small, (0.5, 0.4))
    with pytest.raises(ValueError, match="rng must be"):
        split_indices(small, rng=-1)


def test_split_by_length(small):
    short, long = split_by_length(small, 8)
    assert len(short) + len(long) == len(small)
    assert short.lengths.max() <= 8 < long.lengths.min()
    assert not strings_of(short) & strings_of(long)


# ----------------------------------------------------------------------------- batching


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("bucket", [True, False])
def test_samplers_yield_every_index_once(small, shuffle, drop_last, bucket):
    n, batch_size = len(small), 32
    if bucket:
        sampler = LengthBucketSampler(small.lengths, batch_size, shuffle=shuffle, seed=1,
                                      drop_last=drop_last, chunk_batches=4)
    else:
        sampler = BatchSampler(n, batch_size, shuffle=shuffle, seed=1, drop_last=drop_last)
    for _ in range(2):  # two epochs
        batches = list(sampler)
        assert len(batches) == len(sampler)
        seen = np.concatenate(batches)
        assert len(seen) == len(set(seen.tolist()))
        if drop_last:
            assert all(len(b) == batch_size for b in batches)
            assert len(seen) == n - n % batch_size
        else:
            assert sorted(seen.tolist()) == list(range(n))


def test_sampler_epochs_differ_and_replay(small):
    sampler = LengthBucketSampler(small.lengths, 16, shuffle=True, seed=4)
    first, second = list(sampler), list(sampler)
    assert first != second
    sampler.set_epoch(0)
    assert list(sampler) == first
    assert list(LengthBucketSampler(small.lengths, 16, shuffle=True, seed=4)) == first


def test_bucketing_reduces_padding(small):
    def padding(sampler):
        lengths = small.lengths
        return sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in sampler)

    plain = padding(BatchSampler(len(small), 32, shuffle=True, seed=0))
    bucketed = padding(LengthBucketSampler(small.lengths, 32, shuffle=True, seed=0))
    assert bucketed < plain / 2
    ordered = list(LengthBucketSampler(small.lengths, 32, shuffle=False))
    flat = small.lengths[np.concatenate(ordered)]
    assert (np.diff(flat) >= 0).all()


def test_collate_matches_batch_and_layout(small):
    tok = DyckTokenizer(small.language)
    idx = [4, 0, 17, 3, 250]
    batch = collate([small[i] for i in idx], tok)
    direct = small.batch(idx, tok)
    assert set(batch) >= {"tokens", "labels", "lengths", "kinds"}
    for key in ("tokens", "labels", "lengths", "depths", "indices"):
        assert torch.equal(batch[key], direct[key]), key
    assert batch["kinds"] == direct["kinds"]
    tokens, lengths = batch["tokens"], batch["lengths"]
    assert tokens.dtype == torch.int64 and batch["labels"].dtype == torch.int64
    assert tokens.shape == (len(idx), int(lengths.max()) + 2)
    assert (tokens[:, 0] == START).all()
    assert (tokens[torch.arange(len(idx)), lengths + 1] == END).all()
    for row, length in zip(tokens, lengths.tolist()):
        assert (row[length + 2:] == PAD).all()
    assert tok.decode(tokens) == [small.string(i) for i in idx]
    assert batch["labels"].tolist() == [int(small.labels[i]) for i in idx]


def test_loader_covers_the_dataset(small):
    loader = make_loader(small, 50, shuffle=True, bucket=True, seed=2)
    seen, labels = [], {}
    for batch in loader:
        seen.extend(batch["indices"].tolist())
        labels.update(zip(batch["indices"].tolist(), batch["labels"].tolist()))
    assert sorted(seen) == list(range(len(small)))
    assert [labels[i] for i in range(len(small))] == small.labels.tolist()
    assert len(loader) == len(list(loader))


# ----------------------------------------------------------------------------- JSONL and cache


def reseal(path: Path, **meta_changes) -> None:
    """Rewrite the sidecar so that it matches the JSONL bytes again (a consistent forgery)."""
    meta_path = path.with_name(path.name + ".meta.json")
    meta = json.loads(meta_path.read_text())
    data = path.read_bytes()
    meta.update(sha256=hashlib.sha256(data).hexdigest(), n_lines=data.count(b"\n"), **meta_changes)
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    meta["meta_sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    meta_path.write_text(json.dumps(meta))


@pytest.fixture()
def saved(small, tmp_path) -> Path:
    path = tmp_path / "d.jsonl"
    save_jsonl(small, path, spec=SMALL)
    return path


def test_jsonl_round_trip(small, saved):
    lines = saved.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    assert set(record) == {"string", "label", "kind", "length"}
    assert record["label"] in (0, 1) and record["length"] == len(record["string"])
    meta = json.loads(saved.with_name("d.jsonl.meta.json").read_text())
    assert meta["n_lines"] == len(small) and meta["spec"] == SMALL.to_dict()
    assert meta["sha256"] == hashlib.sha256(saved.read_bytes()).hexdigest()
    loaded = load_jsonl(saved)
    assert loaded.strings() == small.strings()
    assert loaded.labels.tolist() == small.labels.tolist()
    assert loaded.kinds == small.kinds
    assert loaded.depths.tolist() == small.depths.tolist()
    assert loaded.spec == SMALL
    # Atomic writes leave no temporary files behind.
    assert sorted(p.name for p in saved.parent.iterdir()) == ["d.jsonl", "d.jsonl.meta.json"]


def test_jsonl_non_ascii_alphabet(tmp_path):
    language = Dyck(6)  # includes ⟨⟩ and ⟦⟧
    strings = ["⟨⟦⟧⟩", "⟨)"]
    data = DyckDataset.from_strings(strings, [1, 0], language, kinds=["positive", "swap"])
    save_jsonl(data, tmp_path / "u.jsonl")
    assert load_jsonl(tmp_path / "u.jsonl").strings() == strings


def test_truncated_file_is_detected(saved):
    lines = saved.read_bytes().splitlines(keepends=True)
    saved.write_bytes(b"".join(lines[:-1]))
    with pytest.raises(ValueError, match=rf"{saved.name}: has {len(lines) - 1} lines but .* "
                                         rf"records {len(lines)}"):
        load_jsonl(saved)
    saved.write_bytes(b"".join(lines)[:-7])  # cut inside the last line
    with pytest.raises(ValueError, match="lines but"):
        load_jsonl(saved)


def test_edited_character_is_detected(saved):
    data = bytearray(saved.read_bytes())
    at = data.index(b'"string": "') + len(b'"string": "')
    data[at:at + 1] = b")" if data[at:at + 1] == b"(" else b"("
    saved.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{saved.name}: sha256 .* does not match"):
        load_jsonl(saved)


def test_edited_sidecar_is_detected(saved):
    meta_path = saved.with_name(saved.name + ".meta.json")
    meta = json.loads(meta_path.read_text())
    meta["language"]["k"] = 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="sidecar was edited"):
        load_jsonl(saved)
    meta_path.unlink()
    with pytest.raises(FileNotFoundError, match="sidecar"):
        load_jsonl(saved)


def test_wrong_label_names_the_line(saved):
    lines = saved.read_text(encoding="utf-8").splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if json.loads(line)["label"] == 1)
    record = json.loads(lines[number])
    record.update(label=0, kind="swap")
    lines[number] = json.dumps(record) + "\n"
    saved.write_text("".join(lines), encoding="utf-8")
    reseal(saved)
    with pytest.raises(ValueError, match=rf"line {number + 1}: label 0 but the string .* is a member"):
        load_jsonl(saved)


@pytest.mark.parametrize("record, match", [
    ({"string": "()", "label": 1, "kind": "positive"}, "expected the fields"),
    ({"string": "()", "label": 1, "kind": "positive", "length": 3}, "length 3 but the string has 2"),
    ({"string": "()", "label": 2, "kind": "positive", "length": 2}, "label must be 1 or 0"),
    ({"string": "()", "label": 1, "kind": "swap", "length": 2}, "contradicts label"),
    ({"string": "(x", "label": 0, "kind": "swap", "length": 2}, "character 'x'"),
])
def test_bad_records_name_the_line(saved, record, match):
    lines = saved.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = json.dumps(record) + "\n"
    saved.write_text("".join(lines), encoding="utf-8")
    reseal(saved)
    with pytest.raises(ValueError, match=f"line 3: .*{match}"):
        load_jsonl(saved)


def test_load_or_generate_caches_by_every_parameter(tmp_path):
    spec = DatasetSpec(k=2, n=120, min_length=0, max_length=10, seed=1)
    first = load_or_generate(spec, tmp_path)
    path = cache_path(spec, tmp_path)
    assert path.exists()
    again = load_or_generate(spec, tmp_path)
    assert again.strings() == first.strings() and again.spec == spec
    other = load_or_generate(dataclasses.replace(spec, min_length=4), tmp_path)
    assert cache_path(dataclasses.replace(spec, min_length=4), tmp_path) != path
    assert other.lengths.min() >= 4
    # A corrupted cache entry is regenerated, loudly.
    path.write_text(path.read_text()[:-20])
    with pytest.warns(UserWarning, match="failed verification"):
        fixed = load_or_generate(spec, tmp_path)
    assert fixed.strings() == first.strings()
    assert load_jsonl(path).strings() == first.strings()


def test_split_keeps_the_length_mix_of_each_part():
    # Short strings repeat a lot (there is one word of length 0 and one of length 2 in Dyck-1):
    # disjointness forces each repeated string into one part, but no part may be starved of or
    # flooded with short strings systematically. Over many seeds the share of lengths <= 4 in
    # each part must match the whole dataset's share.
    data = generate_dataset(DatasetSpec(k=1, n=4000, min_length=0, max_length=16,
                                        negatives="random", seed=2))
    short = data.lengths <= 4
    overall = short.mean()
    shares = np.array([[short[idx].mean() for idx in split_indices(data, rng=seed)]
                       for seed in range(40)])
    assert np.all(np.abs(shares.mean(axis=0) - overall) < 0.25 * overall)
