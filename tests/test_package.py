"""The package root: every advertised name resolves, and importing it stays cheap."""

import subprocess
import sys

import dyckbook


def test_every_export_resolves():
    for name in dyckbook.__all__:
        assert getattr(dyckbook, name) is not None, name


def test_unknown_attribute_is_an_attribute_error():
    try:
        dyckbook.NotAThing  # noqa: B018
    except AttributeError as error:
        assert "NotAThing" in str(error)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_language_layer_does_not_import_torch():
    code = ("import sys, dyckbook; d = dyckbook.Dyck(3); assert d.is_member('([]){}');"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
