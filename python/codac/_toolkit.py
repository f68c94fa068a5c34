"""Where NVRTC and the CUDA headers come from.

The runtime looks for a CUDA toolkit at ``$CUDA_HOME``, ``$CUDA_PATH`` and
``/usr/local/cuda``. On a machine with no toolkit, the NVIDIA wheels from the
Python package index (``nvidia-cuda-nvrtc``, ``nvidia-cuda-runtime``,
``nvidia-cuda-cccl``, which this package depends on) hold everything NVRTC
needs; point ``CUDA_HOME`` at them before the first compile.
"""

from __future__ import annotations

import os
from pathlib import Path


def _wheel_root() -> Path | None:
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        for name in ("cu13", "cu12"):
            root = Path(base) / name
            if (root / "include" / "cuda_bf16.h").is_file() or (root / "include" / "cuda_runtime.h").is_file():
                return root
    return None


def configure() -> None:
    """Sets ``CUDA_HOME`` to the NVIDIA wheels when no toolkit is configured."""
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return
    if Path("/usr/local/cuda/include/cuda_bf16.h").is_file():
        return
    root = _wheel_root()
    if root is not None:
        os.environ["CUDA_HOME"] = str(root)
