"""A server wrapper for the injection tests: ``python argv_dump.py OUT_DIR <python args...>`` writes the argv and
the ``HOSTILE_*``/``HF_TOKEN`` environment it received to ``OUT_DIR/<pid>.json`` exactly as the kernel handed them
over, then execs ``python <python args...>`` (the simulator) in the same process."""

import json
import os
import sys

out_dir, rest = sys.argv[1], sys.argv[2:]
env = {k: v for k, v in os.environ.items() if k.startswith("HOSTILE_") or k == "HF_TOKEN"}
with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as f:
    json.dump({"argv": rest, "env": env}, f)
os.execv(sys.executable, [sys.executable, *rest])
