"""A pytest plugin for the nbval re-execution in ``tests/test_notebooks.py``: every kernel nbval
starts talks over IPC sockets in a folder of its own instead of loopback TCP.

nbval starts each kernel over TCP on ports the client picks and the kernel binds a moment later;
two kernels started together (nbval's two workers, or a test on the other xdist worker) may pick
the same port, and the loser dies before its first reply ("Kernel died before replying to
kernel_info", CI of 2026-12-07). The runner's own kernels use IPC for this reason
(``dyckbook.pipeline.runner._kernel_manager``); this does the same for nbval's. A kernel that still
dies while starting (nbval sends its stderr to /dev/null) is started once more, with a warning:
only the start is retried, never a cell.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import nbval.kernel
from jupyter_client.manager import KernelManager

# short: a Unix socket path is limited to ~107 bytes
_SOCKETS = Path(tempfile.mkdtemp(prefix="nbk-", dir="/tmp" if Path("/tmp").is_dir() else None))
atexit.register(shutil.rmtree, _SOCKETS, ignore_errors=True)


class IpcKernelManager(KernelManager):
    """A kernel manager whose kernel's sockets are files in a folder no other kernel uses."""

    def __init__(self, **kw: Any) -> None:
        folder = Path(tempfile.mkdtemp(dir=_SOCKETS))
        super().__init__(**kw, transport="ipc", ip=str(folder / "ipc"))


nbval.kernel.KernelManager = IpcKernelManager  # the name nbval's start_new_kernel calls


_start_new_kernel = nbval.kernel.start_new_kernel


def start_new_kernel(*args: Any, **kw: Any) -> Any:
    """nbval's kernel start, tried a second time if the kernel dies before its first reply."""
    try:
        return _start_new_kernel(*args, **kw)
    except RuntimeError as exc:
        warnings.warn(f"an nbval kernel died while starting ({exc}); starting another",
                      stacklevel=2)
        return _start_new_kernel(*args, **kw)


nbval.kernel.start_new_kernel = start_new_kernel  # the name RunningKernel calls
