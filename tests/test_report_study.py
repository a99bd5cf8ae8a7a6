"""A real Optuna study in a real journal file, with the trials and attributes the driver writes.

``build_study`` is shared by the notes, report and dashboard tests (``from test_report_study import build_study``).
Trials are made with ``study.ask()``/``tell()`` exactly as the driver makes them (user attrs, constraints,
intermediate values, ``annotate`` after each tell); the end-to-end study through the simulator is tested elsewhere.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer.notes import annotate
from optimizer.settings import StudyConfig
from optimizer.sglang.flags import ALGO, DRAFT, STEPS, TOPK
from optimizer.sglang.logs import BOOT_PHASE_NAMES as PHASES
from optimizer.study import baseline_trial, best_trial, open_storage

SECRET = "hf_" + "A" * 30


@dataclass
class Spec:
    outcome: str
    params: dict[str, Any]
    tok: float = 0.0
    accept: float | None = None
    host: str = "gpu-a"
    kind: str = ""
    reason: str = ""
    prune_at: int | None = None
    dup_of: int | None = None
    launched: bool = True


def _specs() -> list[Spec]:
    def p(
        algo: str = "EAGLE3",
        s: int = 3,
        k: int = 1,
        d: int | None = None,
        attn: str = "flashinfer",
        proto: str = "unset",
        nalgo: str = "unset",
    ) -> dict[str, Any]:
        out: dict[str, Any] = {ALGO: algo}
        if algo != "none":
            out.update({STEPS: s, TOPK: k})
            if k > 1:
                out[DRAFT] = d or 8
        out.update({"attention-backend": attn, "NCCL_PROTO": proto, "NCCL_ALGO": nalgo})
        return out

    return [
        Spec("complete", p("none"), tok=101.0, host="gpu-a"),
        Spec("complete", p(s=3, k=1), tok=171.0, accept=2.9, host="gpu-b"),
        Spec(
            "infeasible",
            p(s=4, k=4, d=16, attn="triton"),
            host="gpu-a",
            kind="cuda_graph",
            reason="CUDA graph capture failed: triton attention does not support tree speculation",
        ),
        Spec("complete", p(s=2, k=1, proto="LL", nalgo="Ring"), tok=188.5, accept=2.6, host="gpu-b"),
        Spec("pruned", p(s=5, k=2, d=6), tok=120.0, accept=3.4, host="gpu-a", prune_at=1),
        Spec("duplicate", p(s=3, k=1), tok=171.0, host="", dup_of=1, launched=False),
        Spec(
            "infeasible",
            p(s=5, k=4, d=16),
            host="",
            kind="precheck",
            launched=False,
            reason="tree of 4^5 nodes exceeds the runtime limit",
        ),
        Spec("complete", p(s=1, k=1, proto="LL"), tok=150.2, accept=1.8, host="gpu-b"),
        Spec(
            "infeasible",
            p(s=3, k=2, d=8, proto="LL128", nalgo="Tree"),
            host="gpu-a",
            kind="hang",
            reason="no progress for 600 s (NCCL LL128 with Tree)",
        ),
        Spec("complete", p(s=2, k=2, d=4), tok=176.3, accept=2.8, host="gpu-b"),
        Spec("failed", p(s=4, k=1), host="gpu-a", kind="host_fault", reason="host fault: ssh connection lost"),
        Spec("complete", p(s=4, k=1, nalgo="Ring"), tok=163.9, accept=3.2, host="gpu-b"),
        Spec("complete", p(s=2, k=4, d=8), tok=158.0, accept=2.7, host="gpu-a"),
        Spec("complete", p(s=2, k=1, proto="LL", nalgo="Tree"), tok=183.0, accept=2.6, host="gpu-b"),
    ]


def _suggest(trial: optuna.Trial, params: dict[str, Any]) -> None:
    trial.suggest_categorical(ALGO, ["none", "EAGLE3"])
    if STEPS in params:
        trial.suggest_int(STEPS, 1, 5)
        trial.suggest_categorical(TOPK, [1, 2, 4])
    if DRAFT in params:
        trial.suggest_int(DRAFT, 2, 16)
    trial.suggest_categorical("attention-backend", ["flashinfer", "triton"])
    trial.suggest_categorical("NCCL_PROTO", ["unset", "LL", "LL128"])
    trial.suggest_categorical("NCCL_ALGO", ["unset", "Ring", "Tree"])


def _short(params: dict[str, Any]) -> str:
    if params[ALGO] == "none":
        return "baseline (no speculation)"
    s = f"EAGLE3 s{params[STEPS]} k{params[TOPK]} d{params.get(DRAFT, params[STEPS] + 1)}"
    if params["NCCL_ALGO"] != "unset":
        s += f" algo={params['NCCL_ALGO']}"
    if params["NCCL_PROTO"] != "unset":
        s += f" proto={params['NCCL_PROTO']}"
    if params["attention-backend"] != "flashinfer":
        s += f" attn={params['attention-backend']}"
    return s


def build_study(
    root: Path, *, name: str = "ui", n: int | None = None, seed: int = 0
) -> tuple[optuna.Study, StudyConfig]:
    """``root/<name>/journal.log`` with ``n`` (default all 14) trials of every outcome on two hosts."""
    rng = random.Random(seed)
    cfg = StudyConfig(study=name, studies_dir=str(root))
    cfg.study_dir.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name=name,
        storage=open_storage(cfg.storage_url),
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=seed),
    )
    study.set_user_attr("optimizer_version", "test")
    study.set_user_attr("server_command", f"python3 -m sglang.launch_server --api-key {SECRET}")
    study.set_user_attr("space", "search_spaces/demo.yaml")
    study.set_user_attr("workload", {"concurrency": 16, "max_tokens": 256, "chunks": 4})
    study.set_user_attr("created", "2026-11-30T08:00:00+0000")
    clock = {"gpu-a": 1_780_000_000.0, "gpu-b": 1_780_000_030.0, "": 1_780_000_000.0}
    specs = _specs()[: n or None]
    for _i, sp in enumerate(specs):
        study.enqueue_trial(sp.params)
        trial = study.ask()
        _suggest(trial, sp.params)
        ua = trial.set_user_attr
        ua("config", _short(sp.params))
        ua("candidate_key", json.dumps(sp.params, sort_keys=True))
        flags = {k: v for k, v in sp.params.items() if not k.startswith("NCCL")}
        flags["speculative-draft-model-path"] = "lightseekorg/kimi-k2.5-eagle3"
        env = {k: v for k, v in sp.params.items() if k.startswith("NCCL") and v != "unset"}
        env["HF_TOKEN"] = SECRET
        ua("flags", flags)
        ua("env", env)
        if sp.params[ALGO] == "none":
            ua("baseline", True)
        if sp.dup_of is not None:
            ua("duplicate_of", sp.dup_of)
            ua("outcome", "duplicate")
            trial.set_constraint("server", 0.0)
            ua("constraint:server", 0.0)
            study.tell(trial, sp.tok)
            annotate(study, study.get_trials(deepcopy=False)[trial.number], cfg)
            continue
        if sp.host:
            ua("host", sp.host)
        if sp.launched:
            ua("launched", True)
            t0 = clock[sp.host] + rng.uniform(1, 4)
            boot = {}
            at = 0.0
            stop = 5 if sp.kind == "cuda_graph" else len(PHASES)
            for ph in PHASES[:stop]:
                at += {"weights_loaded": 40.0, "cuda_graph_end": 25.0 + 4 * sp.params.get(STEPS, 0)}.get(
                    ph, rng.uniform(0.5, 4)
                )
                boot[ph] = round(at, 2)
            ua("boot_phases", boot)
            if sp.kind != "cuda_graph":
                ua("boot_s", boot["ready_line"])
            trial_dir = cfg.study_dir / "trials" / str(trial.number)
            trial_dir.mkdir(parents=True, exist_ok=True)
            log = trial_dir / "server.log"
            log.write_text(
                "".join(f"[2026-11-30 08:00:{j:02d}] boot line {j}\n" for j in range(40))
                + f"server_args=ServerArgs(model_path='m', api_key='{SECRET}', tp_size=8)\n"
                + ("RuntimeError: CUDA graph capture failed\n" if sp.kind == "cuda_graph" else "")
            )
            ua("log_path", str(log.absolute()))
            chunks = 4 if sp.outcome == "complete" else (sp.prune_at + 1 if sp.prune_at is not None else 0)
            if chunks:
                rec = trial_dir / "bench.json"
                rec.write_text(json.dumps({"records": [{"ttft_ms": 50 + j, "output_tokens": 256} for j in range(8)]}))
                ua("records_path", str(rec.absolute()))
            for c in range(chunks):
                trial.report(sp.tok * (0.95 + 0.03 * c) + rng.uniform(-3, 3), step=c)
            dur = (boot.get("ready_line") or at) + chunks * 20.0 + (600 if sp.kind == "hang" else 0)
            ua("t_start", t0)
            ua("t_end", t0 + dur)
            clock[sp.host] = t0 + dur
            if chunks:
                ua("tok_per_s", sp.tok)
                ua("requests_per_s", sp.tok / 256)
                for m, base in (
                    ("ttft_ms", 180.0),
                    ("itl_ms", 1000.0 / max(sp.tok, 1) * 16),
                    ("e2e_ms", 256 * 16000.0 / max(sp.tok, 1)),
                ):
                    ua(f"{m}_mean", base)
                    ua(f"{m}_p50", base * 0.95)
                    ua(f"{m}_p99", base * 1.8)
                if sp.accept is not None:
                    ua("accept_length", sp.accept)
                ua("tokens_per_chunk", 16 * 256)
                ua("completed", 16 * chunks)
                ua("failed", 0)
                ua("chunks_run", chunks)
        if sp.outcome == "complete":
            ua("outcome", "complete")
            trial.set_constraint("server", 0.0)
            ua("constraint:server", 0.0)
            study.tell(trial, sp.tok)
            if sp.params[ALGO] == "none":
                study.set_user_attr("baseline_tok_per_s", sp.tok)
                study.set_user_attr("baseline_trial", trial.number)
        elif sp.outcome == "pruned":
            ua("outcome", "pruned")
            ua("pruned_at_chunk", sp.prune_at)
            study.tell(trial, state=TrialState.PRUNED)
        elif sp.outcome == "infeasible":
            ua("outcome", "infeasible")
            ua("failure_kind", sp.kind)
            ua("failure_reason", sp.reason)
            if sp.launched:
                ua("log_tail", f'loading weights\n  File "x.py", line 3\nRuntimeError: {sp.reason}\ntoken={SECRET}\n')
            name = "tree_size" if sp.kind == "precheck" else "server"
            trial.set_constraint(name, 1.0)
            ua(f"constraint:{name}", 1.0)
            study.tell(trial, 0.0)
        else:
            ua("outcome", "failed")
            ua("failure_reason", sp.reason)
            study.tell(trial, state=TrialState.FAIL)
        annotate(study, study.get_trials(deepcopy=False)[trial.number], cfg)
    return study, cfg


def test_build_study_has_every_outcome(tmp_path: Path) -> None:
    study, cfg = build_study(tmp_path)
    outcomes = {t.user_attrs["outcome"] for t in study.get_trials()}
    assert outcomes == {"complete", "pruned", "infeasible", "duplicate", "failed"}
    assert baseline_trial(study).number == 0
    assert best_trial(study).user_attrs["config"] == "EAGLE3 s2 k1 d3 algo=Ring proto=LL"
    # the journal file is real: a fresh storage reads the same trials back
    again = optuna.load_study(study_name="ui", storage=open_storage(cfg.storage_url))
    assert len(again.get_trials()) == len(study.get_trials())


# ---------------------------------------------------------------------------------------------- headless Chromium
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
SCREENSHOTS = Path(__file__).parent / "screenshots"


def chromium() -> str:
    """The Chromium binary; a clear failure (never a skip) when it is missing."""
    import shutil

    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError(
        "headless Chromium is not installed: run `make system-deps` (or `make test`, which runs "
        "it) or `apt-get install -y chromium`"
    )


def run_chromium(url: str, *args: str, timeout: float = 120.0) -> str:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        proc = subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.stdout


def png_pixels(path: Path) -> Any:
    """Decode an 8-bit non-interlaced PNG (what Chromium writes) into an (h, w, channels) uint8 array."""
    import struct
    import zlib

    import numpy as np

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, w = 8, [], 0
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and ctype in (0, 2, 4, 6), (depth, ctype, interlace)
            bpp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8).reshape(h, 1 + w * bpp)
    out = np.zeros((h, w * bpp), dtype=np.uint8)
    prev = np.zeros(w * bpp, dtype=np.int32)
    for y in range(h):
        f, row = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            cur = row
        elif f == 1:
            cur = np.cumsum(row.reshape(w, bpp), axis=0).reshape(-1) & 0xFF
        elif f == 2:
            cur = (row + prev) & 0xFF
        else:  # average and Paeth depend on the pixel to the left: byte by byte
            r, p, c = row.tolist(), prev.tolist(), [0] * (w * bpp)
            for i in range(w * bpp):
                a = c[i - bpp] if i >= bpp else 0
                if f == 3:
                    c[i] = (r[i] + ((a + p[i]) >> 1)) & 0xFF
                else:
                    b, cc = p[i], p[i - bpp] if i >= bpp else 0
                    pa, pb, pc = abs(b - cc), abs(a - cc), abs(a + b - 2 * cc)
                    c[i] = (r[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else cc)) & 0xFF
            cur = np.array(c, dtype=np.int32)
        out[y] = cur
        prev = cur
    return out.reshape(h, w, bpp)


def distinct_colours(path: Path) -> int:
    import numpy as np

    px = png_pixels(path)[:, :, :3].reshape(-1, 3).astype(np.uint32)
    return int(np.unique((px[:, 0] << 16) | (px[:, 1] << 8) | px[:, 2]).size)


def open_page(url: str, name: str, *, size: str = "1400,1000", budget_ms: int = 10000) -> tuple[str, Path]:
    """One Chromium run: the rendered DOM (after ``budget_ms`` of virtual time) and a screenshot of the page."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    out = SCREENSHOTS / name
    out.unlink(missing_ok=True)
    dom = run_chromium(
        url, "--dump-dom", f"--screenshot={out}", f"--window-size={size}", f"--virtual-time-budget={budget_ms}"
    )
    assert out.is_file() and out.stat().st_size > 0, f"chromium wrote no screenshot for {url}"
    return dom, out
