"""What a running server and its host say about themselves, read once per trial after the benchmark.

- ``/server_info`` (``/get_server_info`` on older SGLang): the settings the server really runs, its version;
  compared with what the trial asked for (``optimizer.alarms.server_changes``).
- A greedy check: a few fixed prompts at temperature 0, short outputs; a digest of each output's text lets the
  alarms compare every speculative trial with the baseline (speculative decoding is lossless at temperature 0).
- The host: GPU and driver (``nvidia-smi``), CPU model, load and cores, the NCCL version when the server log
  shows it, and whether SGLang found the GPUs PCIe-only (it disables custom all-reduce and says so), since a winner
  holds for the machine it was measured on (and the structured sampler reads the last one).

Every probe tolerates a server or host that does not answer: it returns what it could read.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Callable
from typing import Any

import httpx

from .loadgen.workload import BUILTIN_PATH
from .sglang.logs import PCIE_ONLY_ALLREDUCE
from .study import records as R

GREEDY_PROMPTS = 4
GREEDY_MAX_TOKENS = 32
#: Compare this many characters of each output: real kernels are not bit-exact across batch shapes, so late
#: tokens may drift even when nothing is broken; a broken drafter or kernel changes the text from the start.
GREEDY_PREFIX_CHARS = 120
HOST_COMMAND = (
    "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 16; echo '@@';"
    " grep -m1 'model name' /proc/cpuinfo 2>/dev/null; echo '@@'; cat /proc/loadavg 2>/dev/null; echo '@@';"
    # The machine's cores, not this process's: nproc reports the CPU affinity, which Ray narrows for its actors
    # (a 2-core machine read as 1 core); getconf and /proc/cpuinfo count the machine's.
    " getconf _NPROCESSORS_ONLN 2>/dev/null || grep -c ^processor /proc/cpuinfo 2>/dev/null"
)
NCCL_RE = re.compile(r"NCCL version (\d+\.\d+\.\d+)")


def server_info(base_url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The server's settings (``/server_info``, else ``/get_server_info``); {} when neither answers."""
    with httpx.Client(timeout=timeout_s) as client:
        for path in ("/server_info", "/get_server_info"):
            try:
                r = client.get(base_url + path)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                try:
                    data = r.json()
                except ValueError:
                    continue
                if isinstance(data, dict):
                    return data
    return {}


def greedy_prompts(n: int = GREEDY_PROMPTS) -> list[dict[str, Any]]:
    """The first prompt of each category of the builtin set: the same few prompts in every trial."""
    seen: dict[str, dict[str, Any]] = {}
    for line in BUILTIN_PATH.read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            seen.setdefault(obj.get("category", "chat"), obj)
    return [seen[c] for c in sorted(seen)][:n]


def greedy_digests(base_url: str, model: str | None = None, timeout_s: float = 60.0) -> dict[str, str]:
    """prompt id -> digest of the first characters of its greedy output; prompts that failed are left out."""
    out: dict[str, str] = {}
    with httpx.Client(timeout=timeout_s) as client:
        for p in greedy_prompts():
            body = {
                "model": model or "default",
                "messages": p["messages"],
                "max_tokens": GREEDY_MAX_TOKENS,
                "temperature": 0.0,
                "stream": False,
                "ignore_eos": True,
                "category": p.get("category"),
            }
            try:
                r = client.post(base_url + "/v1/chat/completions", json=body)
                text = r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
                text = None
            if isinstance(text, str):
                out[str(p["id"])] = hashlib.sha1(text[:GREEDY_PREFIX_CHARS].encode()).hexdigest()[:12]
    return out


def host_facts(run: Callable[[str], tuple[int, str, str]] | None = None, log_text: str = "") -> dict[str, Any]:
    """GPU(s), driver, CPU model, 1-minute load and cores of the host; NCCL's version and ``pcie_only`` (SGLang
    disabled custom all-reduce on more than two GPUs without NVLink) from the server log."""
    if run is None:
        run = _run_local
    try:
        _, out, _ = run(HOST_COMMAND)
    except Exception:  # noqa: BLE001 - a host that cannot say is recorded as such, never a failed trial
        out = ""
    parts = (out or "").split("@@")
    parts += [""] * (4 - len(parts))
    gpus = [ln.strip() for ln in parts[0].splitlines() if ln.strip()]
    facts: dict[str, Any] = {}
    if gpus:
        names = [g.split(",")[0].strip() for g in gpus]
        facts["gpu"] = f"{len(names)}x {names[0]}" if len(set(names)) == 1 else ", ".join(names)
        if "," in gpus[0]:
            facts["driver"] = gpus[0].split(",")[1].strip()
    cpu = parts[1].strip()
    if cpu:
        facts["cpu"] = cpu.split(":", 1)[-1].strip()
    load = parts[2].split()
    if load:
        try:
            facts["load_1m"] = float(load[0])
        except ValueError:
            pass
    cores = parts[3].strip()
    if cores.isdigit():
        facts["cpus"] = int(cores)
    m = NCCL_RE.search(log_text or "")
    if m:
        facts["nccl"] = m.group(1)
    if PCIE_ONLY_ALLREDUCE.rstrip(".") in (log_text or ""):
        facts[R.PCIE_ONLY] = True
    return facts


def _run_local(command: str) -> tuple[int, str, str]:
    p = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout, p.stderr
