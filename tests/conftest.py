"""Shared test setup. Run the suite with: python3 -m pytest -q -n 2 --dist loadfile tests

Without a GPU, Triton kernels run in Triton's interpreter on CPU tensors. The interpreter is chosen
when a kernel is defined, so TRITON_INTERPRET must be set before anything imports train_gpt.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "data")]  # train_gpt; build_shards (the shard writer)

try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # pragma: no cover - the suite needs torch; pytest reports the import error
    pass

from helpers import tiny_data  # noqa: E402, F401  (the session fixture: every test file may ask for it)
