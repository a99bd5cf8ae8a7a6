"""``python -m optimizer.loadgen URL [--workload FILE.yaml] [--field value ...]``: run one benchmark by hand.

Prints each chunk's tok/s as it finishes and the final metrics as JSON. Workload fields can be given as
options with dashes (``--concurrency 8 --max-tokens 256``) or in a YAML file; options override the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from optimizer.errors import ConfigError
from optimizer.loadgen.client import ChunkResult, run_benchmark
from optimizer.loadgen.workload import Workload


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m optimizer.loadgen", description=__doc__.splitlines()[0])
    ap.add_argument("url", help="server base URL, e.g. http://127.0.0.1:30000")
    ap.add_argument("--workload", type=Path, help="YAML file with Workload fields")
    ap.add_argument("--model", help="model name to send (default: what /v1/models reports)")
    for name, f in Workload.model_fields.items():
        ap.add_argument("--" + name.replace("_", "-"), dest=name, default=None, help=f"default {f.default!r}")
    a = ap.parse_args(argv)
    data: dict = {}
    base_dir = None
    try:
        if a.workload:
            import yaml

            data = yaml.safe_load(a.workload.read_text()) or {}
            if not isinstance(data, dict):
                raise ConfigError("expected a mapping of Workload fields", file=str(a.workload))
            base_dir = a.workload.parent
        for name in Workload.model_fields:
            v = getattr(a, name)
            if v is not None:
                if name == "categories":
                    v = v.split(",")
                elif name == "concurrency" and "," in v:
                    v = [x.strip() for x in v.split(",") if x.strip()]  # several levels: 1,8,32 (validated below)
                data[name] = v
        w = Workload.from_dict(data, file=str(a.workload) if a.workload else "command line")

        def show(c: ChunkResult) -> bool:
            print(
                f"concurrency {c.level} chunk {c.index}: {c.tok_per_s:,.1f} tok/s, {c.completed} ok, {c.failed} failed, {c.wall_s:.2f} s",
                file=sys.stderr,
            )
            return True

        res = run_benchmark(a.url, w, model=a.model, on_chunk=show, prompts_base_dir=base_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = res.to_metrics()
    out["failure_reasons"] = res.failure_reasons
    print(json.dumps(out, indent=2))
    return 0 if res.completed else 1


if __name__ == "__main__":
    raise SystemExit(main())
