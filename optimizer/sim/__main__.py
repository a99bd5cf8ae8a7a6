"""``python -m optimizer.sim [SGLang launch flags] [--sim-* options]``: an SGLang-compatible simulated server.

``python -m optimizer.sim truth --profile P --space FILE [--concurrency N] [--out FILE]`` writes ground truth.

Simulator options: ``--sim-profile NAME`` (default llama-3.1-8b-h100), ``--sim-time-scale X`` (multiplies boot
and phase durations), ``--sim-step-scale X`` (multiplies decode step times; 0 = no waiting), ``--sim-seed N``.
Misconfigurations and noise to reproduce: ``--sim-launch-noise SIGMA`` (spread of each boot's speed factor, else
the profile's) and ``--sim-launch-seed N`` (else a fresh factor every boot), ``--sim-broken-verify`` (speculative
decoding emits other tokens than greedy decoding: a broken verify kernel), ``--sim-override FLAG=VALUE`` (the server
silently runs VALUE whatever was asked).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import time

import numpy as np

from ..sglang import adaptive
from ..sglang import flags as sgl
from ..sglang import logs as sglang_logs
from . import cli, logs
from .logs import log


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def _install_sigterm(time_scale: float) -> None:
    def handler(signum, frame):  # noqa: ARG001
        pid = os.getpid()
        log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        log(f"Subprocess scheduler_0 (pid={pid + 1}) crashed with exit code -15. Triggering SIGQUIT for cleanup...")
        log("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        log("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
        _sleep(5.0 * time_scale)
        log("No live scheduler processes found; skipping py-spy and CUDA coredump.")
        log(f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}")
        logs.kill_self()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _server_args_repr(flags: dict, host: str, port: int) -> str:
    items = [f"{k.replace('-', '_')}={v!r}" for k, v in flags.items()]
    return "ServerArgs(" + ", ".join([f"host={host!r}", f"port={port}", *items]) + ")"


def serve(argv: list[str]) -> int:
    from .model import nccl_warn_lines
    from .profiles import DEFAULT_PROFILE, load_profile

    opts = cli.parse(argv, DEFAULT_PROFILE)
    try:
        profile = load_profile(opts.profile)
    except KeyError as exc:
        cli.usage_error(f"argument --sim-profile: {exc.args[0]}")
    if opts.launch_noise is not None:
        profile = dataclasses.replace(profile, launch_noise=opts.launch_noise)
    ts = opts.time_scale
    _install_sigterm(ts)
    # A silent override (--sim-override): the server runs another value than the one asked for, as SGLang does
    # for some combinations; only /server_info and the server_args line show it.
    flags = {**opts.flags, **opts.overrides}
    env = {k: os.environ[k] for k in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL") if os.environ.get(k)}
    err = sys.stderr

    err.write(
        "/sglang/launch_server.py:56: UserWarning: 'python -m sglang.launch_server' is still supported, but "
        "'sglang serve' is the recommended entrypoint.\n  Example: sglang serve --model-path <model> "
        "[options]\n  warnings.warn(\n"
    )
    if "cuda-graph-max-bs" in flags:
        err.write(
            "\x1b[1;33m'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
            "Use '--cuda-graph-max-bs-decode' instead.\x1b[0m\n"
        )
    err.flush()
    # Python imports of the real launcher (~13-24 s), then argument parsing. (On a real server the UserWarning above
    # comes after the imports; printed first here, a killed boot always leaves a log line behind.)
    _sleep(profile.boot["imports"] * ts)
    violations = sgl.startup_violations(flags, architecture=profile.architecture, gpu_sm=profile.gpu_sm)
    if flags.get("attention-backend") == "trtllm_mha" and not flags.get("page-size"):
        log(
            "TensorRT-LLM MHA only supports page_size of 16, 32, 64 or 128, changing page_size from None to 64.",
            sys.stderr if violations else None,
        )
    if violations:
        _, warnings = sgl.normalize(flags, architecture=profile.architecture)
        for w in warnings:
            if w == sgl.MAX_RUNNING_WARNING:
                log(w + " You can override this by explicitly setting --max-running-requests.", err)
        v = violations[0]
        logs.invalid_args(v.exc, v.message, adaptive=v.rule == "adaptive_config")
        return 1

    ev = profile.evaluate(flags, env, 1)
    norm, warnings = sgl.normalize(flags, architecture=profile.architecture)
    for w in warnings:
        extra = (
            " You can override this by explicitly setting --max-running-requests."
            if w == sgl.MAX_RUNNING_WARNING
            else ""
        )
        log(w + extra)
    if profile.pcie_only_allreduce(flags):
        log(
            sglang_logs.PCIE_ONLY_ALLREDUCE
            + " To silence this warning, specify disable_custom_all_reduce=True explicitly."
        )
    for name in opts.unknown:
        log(f"Simulator: flag --{name} accepted and not modelled.")
    phases = profile.boot_phases(flags)
    ph = dict(phases)
    _sleep(ph["server_args"] * ts)
    log(sglang_logs.SERVER_ARGS + _server_args_repr(norm, opts.host, opts.port))
    if env:
        log("NCCL environment: " + ", ".join(f"{k}={v}" for k, v in sorted(env.items())))

    # -- scheduler process: distributed init
    log(f"{sglang_logs.DIST_INIT_BEGIN}.")
    if ev.failure == "nccl_hang":
        while True:  # NCCL init never returns: no output, no port, no exit
            time.sleep(3600)
    _sleep(ph["init_distributed"] * ts)
    log(f"Init torch distributed ends. elapsed={ph['init_distributed']:.2f} s, mem usage=0.09 GB")
    gpu = profile.gpu_mem_gb
    log(f"Load weight begin. avail mem={gpu - 0.7:.2f} GB")
    _sleep(ph["load_weights"] * ts)
    weights_gb = gpu * 0.55
    log(
        f"{sglang_logs.LOAD_WEIGHT_END}. elapsed={ph['load_weights']:.2f} s, type={profile.architecture}, "
        f"avail mem={gpu - 0.7 - weights_gb:.2f} GB, mem usage={weights_gb:.2f} GB."
    )
    if "load_draft_weights" in ph:
        log(f"Using draft model load_format: '{flags.get('speculative-draft-load-format', 'auto')}'")
        log(f"Load weight begin. avail mem={gpu - 0.7 - weights_gb:.2f} GB")
        _sleep(ph["load_draft_weights"] * ts)
        log(
            f"{sglang_logs.LOAD_WEIGHT_END}. elapsed={ph['load_draft_weights']:.2f} s, type=LlamaForCausalLMEagle3, "
            f"avail mem={gpu - 1.2 - weights_gb:.2f} GB, mem usage=0.50 GB."
        )
    res = profile._resolve(flags)
    adaptive_cfg = res.get("adaptive")
    if adaptive_cfg is not None:
        first = adaptive.Slot(adaptive_cfg.slots[0], res["triple"][0])
        log(adaptive.INIT_LINE.format(steps=first.current, candidates=first.candidates))
    _sleep(ph["memory_pool"] * ts)
    if ev.failure == "oom":
        logs.scheduler_crash(
            [
                '  File "/sglang/srt/managers/scheduler.py", line 4931, in run_scheduler_process',
                "    scheduler = Scheduler(",
                '  File "/sglang/srt/model_executor/model_runner.py", line 2113, in init_memory_pool',
                "    raise RuntimeError(",
            ],
            "RuntimeError: " + ev.message,
        )
    kv = profile.max_total_num_tokens
    avail = gpu * 0.12
    log(
        f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {kv}, K size: {gpu * 0.1:.2f} GB, "
        f"V size: {gpu * 0.1:.2f} GB"
    )
    log(f"{sglang_logs.MEMORY_POOL_END}. avail mem={avail:.2f} GB")
    log(f"{sglang_logs.CUDA_GRAPH_BEGIN}. This can take up to several minutes. avail mem={avail:.2f} GB")
    capture_total = 0.0
    adaptive_fail = profile.adaptive_capture_failure(res) if ev.failure == "cuda_graph" else None
    labels = {
        "capture_prefill": ("target prefill", "backend=breakable, num_tokens=[4, 8, ..., 8192]"),
        "capture_decode": ("target decode", "backend=full, num_tokens_per_req=1"),
        "capture_target_verify": ("target verify", "backend=full"),
        "capture_draft_prefill": ("draft prefill", "backend=breakable"),
        "capture_draft_decode": ("draft decode", "backend=full, num_tokens_per_req=1"),
        "capture_draft_extend": ("draft extend", "backend=full"),
    }
    for name, sec in phases:
        if not name.startswith("capture_"):
            continue
        what, detail = labels[name]
        log(f"Capture {what} CUDA graph begin. {detail}, avail mem={avail:.2f} GB")
        if ev.failure == "nccl_invalid" and name != "capture_prefill":
            _sleep(sec * ts * 0.5)
            for line in nccl_warn_lines(env, profile.tp_size):
                logs.raw(line)
            logs.scheduler_crash(
                [
                    '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 612, in __init__',
                    "    self.capture()",
                    '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 801, in capture',
                    "    raise Exception(",
                ],
                "Exception: " + ev.message,
            )
        if ev.failure == "cuda_graph" and name != "capture_prefill" and adaptive_fail is None:
            _sleep(sec * ts * 0.5)
            logs.scheduler_crash(
                [
                    '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 612, in __init__',
                    "    self.capture()",
                    '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 801, in capture',
                    "    raise Exception(",
                ],
                "Exception: " + ev.message,
            )
        _sleep(sec * ts)
        capture_total += sec
        log(f"Capture {what} CUDA graph end. elapsed={sec:.2f} s, mem usage=0.10 GB, avail mem={avail:.2f} GB.")
    log(
        f"{sglang_logs.CUDA_GRAPH_END}. Time elapsed: {capture_total:.2f} s. mem usage=0.60 GB. avail mem={avail:.2f} GB."
    )
    if adaptive_cfg is not None:
        for name, sec in phases:
            if name.startswith("adaptive_state_"):
                k = int(name.rsplit("_", 1)[1])
                if k == adaptive_fail:  # as the H200 logged it (docs/validation/h200-adaptive-default-crash-2.log)
                    _sleep(sec * ts * 0.5)
                    logs.scheduler_crash(
                        [
                            '  File "/sglang/srt/speculative/eagle_worker_v2.py", line 1315, in build_adaptive_runtime_state',
                            "    self._draft_worker._capture_cuda_graphs()",
                            '  File "/sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py", line 272, in __init__',
                            "    raise Exception(",
                        ],
                        "Exception: " + ev.message,
                    )
                _sleep(sec * ts)
                log(adaptive.BUILT_LINE.format(steps=k, elapsed=sec, mem=profile.adaptive_state_cost(res, k)[1]))
    log(
        f"max_total_num_tokens={kv}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests={res['max_running']}, context_len={profile.context_len}, "
        f"available_gpu_mem={avail:.2f} GB"
    )
    log(
        f"Engine startup timings (s): load_weight={ph['load_weights']:.2f}, "
        f"kv_cache_allocation={ph['memory_pool']:.2f}, scheduler_e2e={sum(ph.values()) - ph['imports']:.2f}"
    )

    coro = _serve_http(opts, profile, flags, env, phases, ev)
    try:  # uvloop and httptools (uvicorn's fast paths) when installed; plain asyncio and h11 otherwise
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


async def _serve_http(opts, profile, flags, env, phases, ev) -> int:
    import uvicorn

    from .engine import Engine
    from .server import State, build_app

    ts = opts.time_scale

    def crash() -> None:
        logs.scheduler_crash(
            [
                '  File "/sglang/srt/managers/scheduler.py", line 3121, in event_loop_overlap',
                "    self.process_batch_result(tmp_batch, tmp_result)",
                '  File "/sglang/srt/speculative/eagle_worker_v2.py", line 702, in verify',
                "    torch.cuda.synchronize()",
            ],
            "torch.AcceleratorError: " + ev.message,
        )

    # Each boot runs a little faster or slower for its whole life (launch-to-launch noise, Profile.launch_noise).
    speed = profile.launch_factor(np.random.default_rng(opts.launch_seed))
    log(f"Simulator: this launch runs at {speed:.3f}x the profile's speed.")
    engine = Engine(
        profile,
        flags,
        env,
        step_scale=opts.step_scale / speed,
        broken_verify=opts.broken_verify,
        seed=opts.seed,
        crash_after=ev.crash_after_requests if ev.failure == "crash_serving" else None,
        on_crash=crash,
    )
    skip_warmup = bool(flags.get("skip-server-warmup"))
    state = State(
        profile,
        flags,
        env,
        engine,
        host=opts.host,
        port=opts.port,
        time_scale=ts,
        boot_phases=phases,
        unknown=opts.unknown,
        skip_warmup=skip_warmup,
    )
    app = build_app(state)
    fmt = "[%(asctime)s] %(levelname)s:     %(message)s"
    log_config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": {"()": "logging.Formatter", "fmt": fmt, "datefmt": logs.FMT},
            "access": {
                "()": "uvicorn.logging.AccessFormatter",
                "use_colors": False,
                "datefmt": logs.FMT,
                "fmt": '[%(asctime)s] %(levelname)s:     %(client_addr)s - "%(request_line)s" %(status_code)s',
            },
        },
        "handlers": {
            "default": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stdout"},
            "access": {"class": "logging.StreamHandler", "formatter": "access", "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }
    config = uvicorn.Config(
        app,
        host=opts.host,
        port=opts.port,
        log_config=log_config,
        access_log=True,
        timeout_keep_alive=30,
        backlog=2048,
        lifespan="off",
        loop="none",
        http="auto",
    )

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # our SIGTERM handler mimics SGLang's launcher
            yield

    server = Server(config)
    scheduler = asyncio.ensure_future(engine.run())

    async def warmup() -> None:
        while not server.started:
            await asyncio.sleep(0.005)
        if not skip_warmup:
            await asyncio.sleep(ph_warmup * ts)
            log('INFO:     127.0.0.1:0 - "POST /generate HTTP/1.1" 200 OK')
        state.ready = True
        log(sglang_logs.READY_LINE)

    ph_warmup = dict(phases).get("warmup", 0.0)
    if skip_warmup:
        state.ready = True  # no 503 phase: connection refused, then 200
    warm = asyncio.ensure_future(warmup())
    try:
        await server.serve()
    finally:
        scheduler.cancel()
        warm.cancel()
    if not server.started:
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "truth":
        from .truth import main as truth_main

        return truth_main(argv[1:])
    logging.getLogger().setLevel(logging.WARNING)
    return serve(argv)


if __name__ == "__main__":
    sys.exit(main())
