"""The original BIG-bench ``dyck_languages`` task (issue 54): its JSON task format read from an
excerpt written by hand, the vendored 1,000 items and their licence, an independent stack check
of every answer, BIG-Bench Hard's 250 among them, and the reader naming malformed items."""

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dyckbook.data.completion import BBH_DYCK_FILE, BIGBENCH_DYCK_FILE, parse_bigbench, to_items
from dyckbook.experiment.results import read_bigbench

ROOT = Path(__file__).resolve().parent.parent
EXCERPT = Path(__file__).resolve().parent / "fixtures" / "bigbench_dyck_excerpt.json"
PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}


def stack_completion(prefix: str) -> str:
    """The shortest completion by a plain stack (independent of the package)."""
    stack = []
    for c in prefix:
        if c in PAIRS:
            stack.append(c)
        else:
            assert stack and PAIRS[stack.pop()] == c, prefix
    return "".join(PAIRS[c] for c in reversed(stack))


def best_answer(example: dict) -> str:
    """The answer an example scores best, by hand: target_scores' top key, else the target."""
    if "target_scores" in example:
        scores = example["target_scores"]
        return max(scores, key=scores.get)
    target = example["target"]
    return target if isinstance(target, str) else next(
        t for t in target if "".join(t.split()) == stack_completion(
            "".join(example["input"].rpartition("Input:")[2].split())))


def test_the_original_format_is_read_from_an_excerpt_written_by_hand():
    raw = json.loads(EXCERPT.read_text())
    items = to_items(read_bigbench(EXCERPT))
    prefixes = ["".join(e["input"].rpartition("Input:")[2].split()) for e in raw["examples"]]
    assert [p for p, _ in items] == prefixes == ["([{", "<>[", "{<()>", "[[<{}>", "(()([]<", "{{"]
    assert [t for _, t in items] == [stack_completion(p) for p in prefixes]
    assert [t for _, t in items] == ["".join(best_answer(e).split()) for e in raw["examples"]]


def test_the_vendored_task_its_licence_and_its_source_are_stored_and_tracked():
    here = BIGBENCH_DYCK_FILE.parent
    assert "Apache License" in (here / "LICENSE").read_text()
    assert "Version 2.0" in (here / "LICENSE").read_text()
    readme = (here / "README.md").read_text()
    digest = hashlib.sha256(BIGBENCH_DYCK_FILE.read_bytes()).hexdigest()
    assert digest in readme and "google/BIG-bench" in readme and "Srivastava" in readme
    if shutil.which("git") and (ROOT / ".git").exists():
        names = [str(here.relative_to(ROOT) / n) for n in ("task.json", "LICENSE", "README.md")]
        out = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True,
                             text=True)
        assert out.returncode == 1 and not out.stdout, out.stdout


def test_the_thousand_items_are_read_and_every_answer_is_the_stacks():
    raw = json.loads(BIGBENCH_DYCK_FILE.read_text(encoding="utf-8"))
    assert raw["task_prefix"].startswith("Complete the rest of the sequence")
    examples = raw["examples"]
    items = to_items(read_bigbench(BIGBENCH_DYCK_FILE))
    assert len(examples) == len(items) == len({p for p, _ in items}) == 1000
    for example, (prefix, target) in zip(examples, items):
        assert prefix == "".join(example["input"].split())
        assert target == stack_completion(prefix) == "".join(best_answer(example).split())
    assert {len(t) for _, t in items} == {1, 2, 3}
    assert (min(len(p) for p, _ in items), max(len(p) for p, _ in items)) == (2, 99)


def test_big_bench_hard_took_250_of_the_thousand_with_the_same_answers():
    original = dict(to_items(read_bigbench(BIGBENCH_DYCK_FILE)))
    hard = to_items(read_bigbench(BBH_DYCK_FILE))
    assert len(hard) == 250 and all(original.get(p) == t for p, t in hard)


@pytest.mark.parametrize("index, field, value, message", [
    (0, "target_scores", {"} ] )": 0, ") ] }": 1}, r"example 0: the best of target_scores "
                                                  r"'\) \] }' is not the shortest completion"),
    (1, "target_scores", {"]": 1, ">": 1}, r"example 1: target_scores has 2 answers with the "
                                           r"best score 1"),
    (1, "target_scores", {"]": "yes"}, r"example 1: needs the string fields"),
    (2, "target", "> }", r"example 2: target '> }' is not the shortest completion"),
    (3, "target", ["] ] ( )", "]"], r"example 3: target none of \['\] \] \( \)', '\]'\]"),
    (3, "target", [], r"example 3: needs the string fields"),
    (4, "input", "( ( ) ( [ ] < ]", r"example 4: .*not a prefix"),
])
def test_the_reader_names_a_malformed_original_item(index, field, value, message):
    raw = json.loads(EXCERPT.read_text())
    raw["examples"][index][field] = value
    with pytest.raises(ValueError, match=message):
        parse_bigbench(json.dumps(raw), "task.json")


def test_the_reader_names_a_prefix_field_that_is_not_text(tmp_path):
    raw = json.loads(EXCERPT.read_text())
    raw["task_prefix"] = ["Complete the rest"]
    path = tmp_path / "task.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=rf"{path}: task_prefix must be a string"):
        read_bigbench(path)
