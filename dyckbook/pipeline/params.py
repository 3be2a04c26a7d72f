"""A notebook's parameters, checked before anything trains: one call after the parameters cell.

    from dyckbook.pipeline import params
    params.check(globals(), n_seeds=params.positive_int, lr=params.positive,
                 min_length=params.integer(3), max_length=params.integer(above="min_length"),
                 pos_encodings=params.comma_list("none", "learned", "sinusoidal"))

A rule checks one parameter's type (``bool`` is not an int; an int is a number) and its allowed
values; a bound may name another parameter. Every problem is reported in one ``ValueError``, a
line per parameter naming it, what it must be and the value given::

    pos_encodings must be a comma list of none|learned|sinusoidal, got 'rope'

The names the runner injects (:data:`RUNNER`) are checked wherever they are defined; a parameter
that may hold anything is listed in ``free``. Only generic rules live here: what a notebook
allows is written in its own call.
"""

from __future__ import annotations

import ast
import difflib
import math
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RUNNER", "Rule", "boolean", "check", "comma_list", "fraction", "int_list", "integer",
           "injected", "joined", "nonneg", "nonneg_int", "number", "one_of", "positive",
           "positive_int", "satisfies", "text"]

_INT = re.compile(r"[+-]?\d+")


class Rule:
    """What one parameter may be. ``problem`` returns None when ``value`` is allowed, else
    ``(what it must be, why)``; ``values`` is the whole namespace (for bounds that name other
    parameters). ``plural`` describes several allowed items (for :func:`comma_list`)."""

    def problem(self, value: Any, values: Mapping[str, Any]) -> tuple[str, str] | None:
        raise NotImplementedError

    def plural(self, values: Mapping[str, Any]) -> str:
        raise NotImplementedError


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


class _Bounded(Rule):
    """An int (``ints``) or a finite number within bounds, each a number or a parameter's name."""

    def __init__(self, ints: bool, low: Any = None, high: Any = None, above: Any = None,
                 below: Any = None, multiple_of: Any = None) -> None:
        self.ints = ints
        self.bounds = [(op, b) for op, b in ((">=", low), (">", above), ("<=", high),
                                             ("<", below)) if b is not None]  # lows first
        self.multiple_of = multiple_of

    def _resolve(self, bound: Any, values: Mapping[str, Any]) -> tuple[str, Any]:
        """(its text, its number or None when the named parameter is not a number itself)."""
        if not isinstance(bound, str):
            return f"{bound:g}", bound
        if bound not in values:
            raise ValueError(f"params: a bound names {bound!r}, which is not a parameter")
        other = values[bound]
        return f"{bound} ({other!r})", other if _is_number(other) else None

    def _texts(self, values: Mapping[str, Any]) -> list[str]:
        plain = {op: b for op, b in self.bounds if not isinstance(b, str)}
        lo = next((op for op in (">=", ">") if op in plain), None)
        hi = next((op for op in ("<=", "<") if op in plain), None)
        out = []
        if lo and hi:  # both ends plain numbers: one interval
            if self.ints and lo == ">=" and hi == "<=":
                out.append(f"in {plain[lo]}..{plain[hi]}")
            else:
                out.append(f"in {'[' if lo == '>=' else '('}{plain[lo]:g}, "
                           f"{plain[hi]:g}{']' if hi == '<=' else ')'}")
        out += [f"{op} {self._resolve(b, values)[0]}" for op, b in self.bounds
                if not (lo and hi and op in (lo, hi))]
        if self.multiple_of is not None:
            out.append(f"a multiple of {self._resolve(self.multiple_of, values)[0]}")
        return out

    def _describe(self, values: Mapping[str, Any], plural: bool) -> str:
        kind = ("ints" if plural else "an int") if self.ints else ("numbers" if plural
                                                                   else "a number")
        return " ".join([kind, " and ".join(self._texts(values))]).strip()

    def plural(self, values: Mapping[str, Any]) -> str:
        return self._describe(values, plural=True)

    def problem(self, value: Any, values: Mapping[str, Any]) -> tuple[str, str] | None:
        ok = _is_int(value) if self.ints else _is_number(value)
        compare = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
                   ">": lambda a, b: a > b, "<": lambda a, b: a < b}
        if ok:
            for op, bound in self.bounds:
                number = self._resolve(bound, values)[1]
                ok = ok and (number is None or compare[op](value, number))
        if ok and self.multiple_of is not None:
            step = self._resolve(self.multiple_of, values)[1]
            ok = not step or value % step == 0
        return None if ok else (self._describe(values, plural=False), "")


def integer(low: Any = None, high: Any = None, *, above: Any = None, below: Any = None,
            multiple_of: Any = None) -> Rule:
    """An int (not a bool) with ``low <= value <= high``, ``above < value < below``; each bound
    a number or the name of another parameter (``integer(above="min_length")``)."""
    return _Bounded(True, low, high, above, below, multiple_of)


def number(low: Any = None, high: Any = None, *, above: Any = None, below: Any = None) -> Rule:
    """A finite int or float (not a bool) within the bounds, as for :func:`integer`."""
    return _Bounded(False, low, high, above, below)


class _OneOf(Rule):
    def __init__(self, allowed: tuple[Any, ...]) -> None:
        if not allowed:
            raise ValueError("one_of needs at least one allowed value")
        self.allowed = allowed

    def plural(self, values: Mapping[str, Any]) -> str:
        return "|".join(map(str, self.allowed))

    def problem(self, value: Any, values: Mapping[str, Any]) -> tuple[str, str] | None:
        if any(type(value) is type(a) and value == a for a in self.allowed):
            return None
        return f"one of {self.plural(values)}", ""


def one_of(*allowed: Any) -> Rule:
    """Exactly one of ``allowed`` (of the same type: ``1`` is not ``"1"``)."""
    return _OneOf(allowed)


class _Text(Rule):
    def plural(self, values: Mapping[str, Any]) -> str:
        return "non-empty strings"

    def problem(self, value: Any, values: Mapping[str, Any]) -> tuple[str, str] | None:
        return None if isinstance(value, str) and value.strip() else ("a non-empty string", "")


class _Boolean(Rule):
    def plural(self, values: Mapping[str, Any]) -> str:
        return "True|False"

    def problem(self, value: Any, values: Mapping[str, Any]) -> tuple[str, str] | None:
        return None if isinstance(value, bool) else ("True or False", "")


class _Joined(Rule):
    def __init__(self, parts: tuple[tuple[Any, ...], ...], sep: str) -> None:
        self.parts, self.sep = parts, sep

    def plural(self, values: Mapping[str, Any]) -> str:
        return self.sep.join(f"({'|'.join(map(str, p))})" for p in self.parts)

    def problem(self, value: Any, values: Mapping[str, Any]) -> tuple[str, str] | None:
        pieces = value.split(self.sep) if isinstance(value, str) else []
        if len(pieces) == len(self.parts) and all(x in p for x, p in zip(pieces, self.parts)):
            return None
        return self.plural(values), ""


def joined(*parts: tuple[Any, ...], sep: str = "-") -> Rule:
    """A string of one value from each of ``parts`` joined by ``sep``: ``joined(MASKS,
    POS_ENCODINGS, READOUTS)`` allows ``causal-none-end``."""
    return _Joined(tuple(tuple(p) for p in parts), sep)


class _Satisfies(Rule):
    def __init__(self, test: Callable[[Any], Any], allowed: str) -> None:
        self.test, self.allowed = test, allowed

    def plural(self, values: Mapping[str, Any]) -> str:
        return self.allowed

    def problem(self, value: Any, values: Mapping[str, Any]) -> tuple[str, str] | None:
        try:
            self.test(value)
        except (ValueError, TypeError, KeyError) as error:
            return self.allowed, str(error)
        return None


def satisfies(test: Callable[[Any], Any], allowed: str) -> Rule:
    """Whatever ``test(value)`` accepts without a ValueError, TypeError or KeyError (a parser
    of the package, e.g. ``grid.cells_named``); ``allowed`` says what that is, and the parser's
    message follows it. In :func:`comma_list`, ``test`` reads each item."""
    return _Satisfies(test, allowed)


class _CommaList(Rule):
    def __init__(self, item: Rule, ints: bool = False) -> None:
        self.item, self.ints = item, ints

    def plural(self, values: Mapping[str, Any]) -> str:
        return f"comma lists of {self.item.plural(values)}"

    def problem(self, value: Any, values: Mapping[str, Any]) -> tuple[str, str] | None:
        must = f"a comma list of {self.item.plural(values)}"
        if self.ints and _is_int(value):
            value = str(value)  # papermill's -p reads `-p ks 3` as an int
        if not isinstance(value, str):
            return must, ""
        items = [x.strip() for x in value.split(",")]
        if self.ints:
            items = [int(x) if _INT.fullmatch(x) else x for x in items]
        for x in items:
            found = ("", "") if x == "" else self.item.problem(x, values)
            if found:
                return must, found[1]
        repeated = sorted({str(x) for x in items if items.count(x) > 1})
        return (f"{must}, each once", f"repeated: {', '.join(repeated)}") if repeated else None


def comma_list(*allowed: Any) -> Rule:
    """A comma-separated string of distinct items (spaces around them ignored): each one of
    ``allowed``, or each accepted by a single :class:`Rule` given instead, or, with nothing
    given, any non-empty items (e.g. results folders)."""
    if len(allowed) == 1 and isinstance(allowed[0], Rule):
        return _CommaList(allowed[0])
    return _CommaList(_OneOf(tuple(map(str, allowed))) if allowed else _Text())


def int_list(low: Any = None, high: Any = None) -> Rule:
    """A comma-separated string of distinct ints within the bounds, e.g. ``"1,3"`` (a lone int,
    as papermill's ``-p ks 3`` gives it, is one item)."""
    return _CommaList(integer(low, high), ints=True)


positive_int = integer(1)
nonneg_int = integer(0)
positive = number(above=0)
nonneg = number(0)
fraction = number(0, 1)
boolean = _Boolean()
text = _Text()


def _device(value: Any) -> None:
    if not (isinstance(value, str) and re.fullmatch(r"cpu|cuda|cuda:\d+|auto", value)):
        raise ValueError("where the run trains; auto: CUDA where there is one")


#: What the runner injects into every notebook (``runner.INJECTED``; ``device`` into those that
#: train), checked wherever defined.
RUNNER: dict[str, Rule] = {"run_name": text, "results_dir": text, "num_threads": nonneg_int,
                           "device": satisfies(_device, "cpu|cuda|cuda:N|auto")}


def injected(values: Mapping[str, Any]) -> list[str]:
    """The names papermill injected into a notebook run (``-p NAME VALUE``, the runner's
    parameters): the assignments of its ``# Parameters`` cell, read from the kernel's history
    (IPython's ``In`` in ``values``); none outside a kernel."""
    history = values.get("In")
    names: list[str] = []
    for source in history if isinstance(history, list) else []:
        if isinstance(source, str) and source.startswith("# Parameters\n"):
            try:
                body = ast.parse(source).body
            except SyntaxError:
                continue
            names += [t.id for n in body if isinstance(n, ast.Assign) for t in n.targets
                      if isinstance(t, ast.Name) and t.id not in names]
    return names


def _not_declared(name: str, declared: list[str]) -> str:
    near = difflib.get_close_matches(name, declared, n=1)
    return (f"{name} is not a parameter of this notebook (given with papermill -p or the "
            f"manifest), so it would be ignored"
            + (f": did you mean {near[0]}?" if near
               else f"; its parameters: {', '.join(declared)}"))


def check(values: Mapping[str, Any], /, *, free: tuple[str, ...] = (), **rules: Rule) -> None:
    """Check the parameters named in ``rules`` (and :data:`RUNNER`'s) in ``values``, a
    notebook's ``globals()``; ``free`` names parameters that may hold anything. A name that
    papermill injected (:func:`injected`) must be one of them: a typo is an error, not a run on
    the defaults.

    Raises:
        ValueError: one line per parameter that breaks its rule, naming the parameter, what it
            must be and the value given, and per injected name that is not a parameter; or a
            rule or ``free`` naming no defined parameter.
        TypeError: a rule that is not a :class:`Rule`.
    """
    free = (free,) if isinstance(free, str) else tuple(free)
    unknown = sorted(n for n in [*rules, *free] if n not in values)
    both = sorted(set(rules) & set(free))
    if unknown or both:
        raise ValueError(f"params.check: {unknown} name no parameter" if unknown else
                         f"params.check: {both} are both checked and free")
    for name, rule in rules.items():
        if not isinstance(rule, Rule):
            raise TypeError(f"params.check: the rule of {name} must be a params rule, "
                             f"got {rule!r}")
    todo = {**{n: r for n, r in RUNNER.items() if n in values and n not in free}, **rules}
    errors = [_not_declared(name, [*todo, *free]) for name in injected(values)
              if name not in todo and name not in free]
    for name, rule in todo.items():
        found = rule.problem(values[name], values)
        if found:
            must, why = found
            errors.append(f"{name} must be {must}, got {values[name]!r}"
                          + (f" ({why})" if why else ""))
    if errors:
        raise ValueError("\n".join(errors))
