"""The page of Dyck-3 at a larger training budget (notebook 09): budgets as ``steps:strings``,
the grid's cells at each, and how far the error falls."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dyckbook.chapters.page import pct, plural, summary_rows


def budget_label(budget: str) -> str:
    """``"1000:8000"`` -> ``"1000 steps, 8000 strings"``."""
    fields = budget_fields(budget)
    return f"{fields['max_steps']} steps, {fields['n_train']} strings"


def budget_fields(budget: str) -> dict[str, int]:
    """``"1000:8000"`` -> the GridSpec fields of a budget run in full (validated at the end)."""
    try:
        steps, strings = (int(x) for x in budget.split(":"))
    except ValueError:
        raise ValueError(f"a budget must be max_steps:n_train, got {budget!r}") from None
    return {"max_steps": steps, "n_train": strings, "eval_every": steps}


def budget_groups(records: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """``{budget: records}`` -> ``{"<cell> @ <budget>": records of that cell}``."""
    out: dict[str, list[Any]] = {}
    for label, group in records.items():
        for r in group:
            m, d = r.config["model"], r.config["data"]
            cell = f"k{d['k']}-L{m['n_layers']}-{m['mask']}-{m['pos_encoding']}-{m['readout']}"
            out.setdefault(f"{cell} @ {label}", []).append(r)
    return out


def budget_rows(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Display rows of every (budget, cell)."""
    return [{"budget": label, **r} for label, group in rows.items()
            for r in summary_rows(group, name="cell")]


def budget_sentence(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Mean accuracy and seeds solved of all cells at each budget, and the error ratio."""
    parts, errors = [], []
    for label, group in rows.items():
        acc = [r["accuracy"] for r in group if math.isfinite(r["accuracy"])]
        mean = sum(acc) / len(acc) if acc else math.nan
        solved = sum(r["solved"] for r in group)
        seeds = sum(r["seeds"] for r in group)
        parts.append(f"{label}: {pct(mean)} on average, {solved} of {plural(seeds, 'seed')} solved")
        errors.append(1 - mean)
    ratio = (f" The error falls by a factor of {errors[0] / errors[-1]:.1f} from the first "
             "budget to the last." if len(errors) > 1 and errors[-1] > 0 else "")
    return "; ".join(parts) + "." + ratio
