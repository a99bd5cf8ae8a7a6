#!/usr/bin/env python3
"""Prints what a real SGLang install's ``--config`` refuses, and compares it with optimizer/sglang/config_file.py.

Builds SGLang's own argument parser (``ServerArgs.add_cli_args``) and its ``ConfigArgumentMerger``, exactly as
``prepare_server_args`` does, then lists ``unsupported_actions`` (destination -> action class) and the store-true
destinations. Exit status 1 when the table in config_file.REFUSED differs. Run on a host with SGLang:

    PYTHONPATH=/tmp/site:. python3 tools/gpu_run/sglang_config_facts.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main() -> int:
    import sglang
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.server_args_config_parser import ConfigArgumentMerger

    from optimizer.sglang import config_file

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    merger = ConfigArgumentMerger(parser)
    real = {d: type(a).__name__ for d, a in merger.unsupported_actions.items()}
    ours = dict(config_file.REFUSED)
    out = {
        "sglang": getattr(sglang, "__version__", "?"),
        "unsupported_actions": real,
        "store_true_count": len(merger.store_true_actions),
        "missing_here": {d: a for d, a in real.items() if ours.get(d) != a},
        "extra_here": {d: a for d, a in ours.items() if d not in real},
    }
    print(json.dumps(out, indent=1, sort_keys=True))
    return 1 if out["missing_here"] or out["extra_here"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
