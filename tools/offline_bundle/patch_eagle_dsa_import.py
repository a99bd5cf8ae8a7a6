#!/usr/bin/env python3
"""Fallback patch for a trimmed sglang 0.5.17 install WITHOUT a working `deep_gemm`.

When EAGLE captures its draft-extend CUDA graphs, sglang/srt/speculative/eagle_worker_v2.py imports the
DSA, DeepSeek-V4 and FlashMLA attention backend classes only to build an `isinstance` list, and the DSA
module does `import deep_gemm` at import time. Without deep_gemm every EAGLE/EAGLE3 boot dies there
("Scheduler hit an exception ... ModuleNotFoundError: No module named 'deep_gemm'").

The bundle carries the real `sgl-deep-gemm` wheel, so this patch is normally NOT applied: gpu_smoke.sh
runs it only if importing that chain fails on the GPU host. It wraps the three imports in
`try/except Exception` (ImportError, or OSError when a .so cannot load) and logs `LOCAL PATCH: skipped ... import: <error>`. For the triton attention
backend it changes nothing: TritonAttnBackend is already in the list.

Usage: python3 patch_eagle_dsa_import.py SITE_DIR     (idempotent; exit 0 when patched or already patched)
"""

from __future__ import annotations

import os
import re
import sys

MARK = "LOCAL PATCH"


def patch_source(src: str) -> str:
    if MARK in src:
        return src
    n_total = 0
    for mod, names in (
        ("dsa_backend", r"\(\s*DeepseekSparseAttnBackend,\s*\)"),
        ("deepseek_v4_backend", r"\(\s*DeepseekV4AttnBackend,\s*\)"),
        ("flashmla_backend", r"FlashMLABackend"),
    ):
        pat = re.compile(
            r"(?P<ind>[ ]+)from sglang\.srt\.layers\.attention\." + mod + r" import " + names + r"\n"
            r"(?P<blank>\s*\n)?"
            r"(?P=ind)graph_supported_backend_types\.append\((?P<cls>\w+)\)\n"
        )

        def repl(m: re.Match) -> str:
            ind = m.group("ind")
            body = m.group(0)
            body = "\n".join(
                (ind + "    " + ln[len(ind) :]) if ln.strip() else ln for ln in body.rstrip("\n").split("\n")
            )
            return (
                f"{ind}try:\n{body}\n{ind}except Exception as _e:  # {MARK}: trimmed install (ImportError, or OSError from a .so)\n"
                f'{ind}    logger.warning("{MARK}: skipped {mod} import: %s", _e)\n'
            )

        src, n = pat.subn(repl, src)
        n_total += n
    if n_total == 0:
        raise SystemExit("patch_eagle_dsa_import: pattern not found (sglang version differs?)")
    return src


def main() -> int:
    site = sys.argv[1] if len(sys.argv) > 1 else "/tmp/site"
    path = os.path.join(site, "sglang", "srt", "speculative", "eagle_worker_v2.py")
    src = open(path).read()
    new = patch_source(src)
    if new == src:
        print(f"already patched: {path}")
        return 0
    compile(new, path, "exec")
    with open(path, "w") as f:
        f.write(new)
    for root, _, files in os.walk(os.path.dirname(path)):
        for fn in files:
            if fn.startswith("eagle_worker_v2.") and fn.endswith(".pyc"):
                os.remove(os.path.join(root, fn))
    print(f"patched: {path} ({new.count(MARK) // 2} imports wrapped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
