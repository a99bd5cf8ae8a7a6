"""Misconfiguration alarms: the mistakes that cost people hours, each with its likely cause and its fix.

Four rules, each a pure function of what a trial recorded (user attributes) and what the baseline recorded:

- ``low_accept``: speculation on, accept length near 1. ``EAGLE`` given an EAGLE-3 drafter runs and accepts
  almost nothing (the field report lost hours to it); so does a drafter trained for another target model.
- ``greedy_mismatch``: at temperature 0 speculative decoding is lossless, so outputs that differ from the
  baseline's on the same prompts mean a broken drafter, kernel or configuration. Real kernels are not bit-exact
  across batch shapes, so only a prefix of each output is compared and most prompts must differ.
  Not raised when the server runs with ``SGLANG_SIMULATE_ACC_LEN`` (dummy-weight benchmarking: SGLang forces the
  accept length and emits fixed tokens, so outputs cannot match); :func:`greedy_unchecked` says so instead.
- ``slower_than_baseline``: a speculative trial slower than no speculation at all (at every measured level).
- ``server_changed``: the server runs another value than the one asked for (read from ``/server_info`` and the
  log at trial time, see ``optimizer.probes``), e.g. SGLang resetting ``--max-running-requests`` to 48 for
  speculative decoding, or an attention backend other than the baseline's when none was pinned.

Notes, the terminal, the report and the summary all call :func:`trial_alarms` / :func:`study_alarms`, so the
rules live here only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .sglang import flags as sgl
from .study import records as R

#: Accept length (bonus token included) at or below which speculation is judged to accept almost nothing.
#: Working drafters measure 1.7-3.5 (CALIBRATION.md); EAGLE with an EAGLE-3 drafter measures 1.0-1.1.
ACCEPT_NEAR_ONE = 1.25
#: Share of greedy-check prompts whose output prefix must differ from the baseline's to raise the alarm.
GREEDY_MISMATCH_SHARE = 0.5
#: Flags never compared with what the server reports: launch plumbing, and paths the server may resolve.
NOT_COMPARED = frozenset({"host", "port", "config", "model-path", "tokenizer-path", "speculative-draft-model-path"})
#: SGLang flags whose ``/server_info`` key has another name in some releases (0.5.17: ``cuda_graph_max_bs_decode``).
SERVER_KEYS = {"cuda-graph-max-bs": ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")}

#: With this variable in the server's environment SGLang forces the accept length and emits fixed draft tokens, so
#: a speculative trial's greedy outputs cannot match the baseline's.
SIMULATED_ACCEPT_ENV = "SGLANG_SIMULATE_ACC_LEN"

# user attributes the rules read (written by the trial through optimizer.probes)
GREEDY_ATTR = R.GREEDY_DIGESTS
CHANGES_ATTR = R.SERVER_CHANGES
ATTN_ATTR = R.SERVER_ATTENTION_BACKEND


@dataclass(frozen=True)
class Alarm:
    kind: str
    seen: str
    cause: str
    fix: str

    def text(self) -> str:
        return f"{self.seen} Likely cause: {self.cause} Fix: {self.fix}"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- the rules
def speculative(flags: Mapping[str, Any]) -> str | None:
    return sgl.algorithm(flags or {})


def low_accept(flags: Mapping[str, Any], accept_length: float | None) -> Alarm | None:
    algo = speculative(flags)
    if algo is None or algo == "NGRAM" or not isinstance(accept_length, (int, float)):
        return None
    if accept_length > ACCEPT_NEAR_ONE:
        return None
    seen = (
        f"Accept length {accept_length:.2f} with speculative decoding on ({algo}): the drafter's tokens are almost "
        "never accepted, so every step pays for drafting and gains nothing."
    )
    if algo == "EAGLE":
        return Alarm(
            "low_accept",
            seen,
            "--speculative-algorithm EAGLE given an EAGLE-3 drafter (EAGLE skips the auxiliary hidden states an "
            "EAGLE-3 head needs), or a drafter trained for another target model.",
            "use --speculative-algorithm EAGLE3 for an EAGLE-3 drafter; otherwise check that "
            "--speculative-draft-model-path was trained for this target model.",
        )
    return Alarm(
        "low_accept",
        seen,
        "a drafter that does not match the target model (trained for another model, size or tokenizer), or an "
        "EAGLE-3 drafter run with the wrong algorithm.",
        "check that --speculative-draft-model-path was trained for this exact target model and that "
        "--speculative-algorithm matches the drafter's kind (EAGLE vs EAGLE3).",
    )


def greedy_mismatch(digests: Mapping[str, str] | None, baseline: Mapping[str, str] | None) -> Alarm | None:
    if not digests or not baseline:
        return None
    common = sorted(set(digests) & set(baseline))
    if not common:
        return None
    differ = [p for p in common if digests[p] != baseline[p]]
    if len(differ) < max(1, GREEDY_MISMATCH_SHARE * len(common)):
        return None
    return Alarm(
        "greedy_mismatch",
        f"Greedy outputs (temperature 0) differ from the baseline's on {len(differ)} of {len(common)} prompts "
        f"({', '.join(differ[:4])}{', ...' if len(differ) > 4 else ''}).",
        "speculative decoding is lossless at temperature 0, so a broken drafter, verify kernel or configuration "
        "changes what the target model generates; its tok/s measure wrong text.",
        "do not use this configuration: compare its outputs with the baseline's by hand, try another "
        "--attention-backend or SGLang release, and report it to SGLang with this trial's command.sh.",
    )


def greedy_unchecked(attrs: Mapping[str, Any], server_env: Mapping[str, Any] | None = None) -> str | None:
    """A one-line note instead of ``greedy_mismatch`` for a speculative trial whose server ran with
    ``SGLANG_SIMULATE_ACC_LEN`` (in the study's ``server.env`` or the trial's own env); None otherwise."""
    if attrs.get(R.BASELINE) or not attrs.get(GREEDY_ATTR) or speculative(attrs.get(R.FLAGS) or {}) is None:
        return None
    env = {**(server_env or {}), **(attrs.get(R.ENV) or {})}
    value = env.get(SIMULATED_ACCEPT_ENV)
    if value is None or str(value) == "unset":
        return None
    return (
        f"greedy output check not meaningful with {SIMULATED_ACCEPT_ENV}={value}: SGLang forces the accept length "
        "and emits fixed tokens, so outputs cannot match the baseline's."
    )


#: Without a measured launch noise, relative differences up to twice this are not called slower (launches of one
#: configuration differ by 0.8-2.7 % on one H200 machine, issue 15).
NOISE_PRIOR = 0.015


@dataclass(frozen=True)
class SlowContext:
    """What the study knows beyond one trial: the launch noise (one sigma, relative), whether the trial's host is
    PCIe-only, and the best launch of the same tree with other settings that beat the baseline (number, config,
    gain)."""

    noise: float = NOISE_PRIOR
    pcie_only: bool = False
    same_tree_win: tuple[int, str, float] | None = None
    nccl_untuned: bool = True  # the trial left NCCL's protocol and algorithm at their defaults


def slower_than_baseline(
    flags: Mapping[str, Any],
    tok_per_s: float | None,
    baseline_tok_per_s: float | None,
    *,
    levels: Mapping[str, float] | None = None,
    baseline_levels: Mapping[str, float] | None = None,
    context: SlowContext | None = None,
) -> Alarm | None:
    """Slower than the baseline at every level measured by both (or overall, when no levels were measured), by more
    than twice the launch noise. On a PCIe-only host where the same tree with other settings won, the settings are
    named as the cause, not the drafter or the tree."""
    ctx = context or SlowContext()
    if speculative(flags) is None:
        return None
    pairs: list[tuple[str, float, float]] = []
    if levels and baseline_levels:
        mine, base = _level_values(levels), _level_values(baseline_levels)
        pairs = [(f"c{k}", mine[k], base[k]) for k in sorted(set(mine) & set(base), key=_level_key)]
    if not pairs and isinstance(tok_per_s, (int, float)) and isinstance(baseline_tok_per_s, (int, float)):
        pairs = [("", float(tok_per_s), float(baseline_tok_per_s))]
    if not pairs or any(b <= 0 for _, _, b in pairs) or any(v >= b * (1 - 2 * ctx.noise) for _, v, b in pairs):
        return None  # not slower, or slower by less than the launches of one configuration differ
    where = (
        "at every concurrency level measured (" + ", ".join(f"{k}: {v / b - 1:+.1%}" for k, v, b in pairs) + ")"
        if pairs[0][0]
        else f"({pairs[0][1]:.1f} against {pairs[0][2]:.1f} tok/s, {pairs[0][1] / pairs[0][2] - 1:+.1%})"
    )
    if ctx.same_tree_win is not None:
        number, config, gain = ctx.same_tree_win
        return Alarm(
            "slower_than_baseline",
            f"Speculative decoding is slower than no speculation {where}.",
            "the communication settings, not the drafter or the tree: "
            + (
                "this host is PCIe-only (SGLang turned custom all-reduce off, NCCL carries every all-reduce) and "
                if ctx.pcie_only
                else ""
            )
            + f"the same tree with other settings measured {gain:+.1%} over the baseline (trial {number}: {config}).",
            f"keep this tree with trial {number}'s settings.",
        )
    if ctx.pcie_only and ctx.nccl_untuned:
        return Alarm(
            "slower_than_baseline",
            f"Speculative decoding is slower than no speculation {where}.",
            "on this PCIe-only host SGLang turned custom all-reduce off and NCCL carries every all-reduce: untuned "
            "NCCL settings can cost the verify step more than the accepted tokens save (or the drafter accepts "
            "little).",
            "search NCCL_PROTO and NCCL_ALGO (LL, Ring) for this tree before serving without speculation; check "
            "the accept length.",
        )
    return Alarm(
        "slower_than_baseline",
        f"Speculative decoding is slower than no speculation {where}.",
        "drafting and verifying cost more than the accepted tokens save: a drafter that accepts little, a tree "
        "too large for this batch size, or a concurrency where the GPU is already compute-bound.",
        "prefer fewer steps and topk 1 at this concurrency, check the accept length, or serve this workload "
        "without speculative decoding.",
    )


def _level_key(k: str) -> tuple[int, str]:
    return (int(k), k) if str(k).isdigit() else (1 << 30, str(k))


def _level_values(levels: Mapping[str, Any]) -> dict[str, float]:
    """tok/s by concurrency level, from the ``levels`` attribute ({"8": {"tok_per_s": ...}} or {"8": 123.4})."""
    out = {}
    for k, v in levels.items():
        value = v.get(R.TOK_PER_S) if isinstance(v, Mapping) else v
        if isinstance(value, (int, float)) and value > 0:
            out[str(k)] = float(value)
    return out


def changed_settings(changes: Sequence[Mapping[str, Any]] | None) -> list[Alarm]:
    out = []
    for ch in changes or ():
        flag = str(ch.get("flag", "?"))
        running, asked = ch.get("running"), ch.get("asked")
        source = ch.get("source") or "/server_info"
        if ch.get("why") == "queue":
            out.append(
                Alarm(
                    "server_changed",
                    f"The server runs at most {running} requests at once (--max-running-requests, from {source}) "
                    f"but the benchmark sends {ch.get('concurrency')}: requests queue, so tok/s is measured at "
                    f"{running} and not at the concurrency asked for.",
                    "SGLang resets --max-running-requests to 48 for speculative decoding when it is not set."
                    if asked is None
                    else "the server lowered the value it was given.",
                    f"add max-running-requests: {ch.get('concurrency')} to the space's fixed flags "
                    "(or --max-running-requests to server.extra_args).",
                )
            )
        elif ch.get("why") == "baseline":
            out.append(
                Alarm(
                    "server_changed",
                    f"The server chose --{flag} {running} for this trial while the baseline ran {asked}; the "
                    "study did not pin it, so the comparison mixes two settings.",
                    "SGLang picks some settings itself and changes them with the configuration (e.g. another "
                    "attention backend for topk > 1).",
                    f"pin {flag} in the space's fixed flags so every trial runs the same value.",
                )
            )
        else:
            out.append(
                Alarm(
                    "server_changed",
                    f"The server runs --{flag} {running} although the trial asked for {asked} (from {source}).",
                    "the server overrode the setting at start-up without failing (SGLang does this silently for "
                    "some flag combinations).",
                    f"read the server log for why; set a value of --{flag} the server keeps, or leave the flag out "
                    "of the space.",
                )
            )
    return out


# ---------------------------------------------------------------------------------------------- server changes
def _same(asked: Any, running: Any) -> bool:
    if isinstance(asked, bool) or isinstance(running, bool):
        return bool(asked) == bool(running) if running is not None else not asked
    try:
        return float(asked) == float(running)
    except (TypeError, ValueError):
        return str(asked).strip().lower() == str(running).strip().lower()


def parse_args(argv: Sequence[str]) -> dict[str, Any]:
    """``--flag value`` / ``--flag`` pairs of a server's extra arguments as a flags mapping."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        tok = str(argv[i])
        if tok.startswith("--"):
            name = tok[2:].replace("_", "-")
            if "=" in name:
                name, value = name.split("=", 1)
                out[name] = value
            elif i + 1 < len(argv) and not str(argv[i + 1]).startswith("--"):
                out[name] = argv[i + 1]
                i += 1
            else:
                out[name] = True
        i += 1
    return out


def server_changes(
    asked: Mapping[str, Any],
    server_args: Mapping[str, Any],
    *,
    concurrency: int = 1,
    architecture: str | None = None,
    log_text: str = "",
) -> list[dict[str, Any]]:
    """What the server runs differently from what it was asked, as plain records (stored with the trial)."""
    expected, _ = sgl.normalize(dict(asked), architecture=architecture)
    out: list[dict[str, Any]] = []
    for flag in asked:
        value = expected.get(flag)  # as SGLang normalises it (topk 1 forces draft = steps + 1); None = dropped
        if flag in NOT_COMPARED or value is None:
            continue
        keys = [k for k in SERVER_KEYS.get(flag, (flag.replace("-", "_"),)) if k in server_args]
        if not keys:
            continue  # this server does not report it
        running = server_args[keys[-1]]
        if not _same(value, running):
            out.append({"flag": flag, "asked": value, "running": running, "source": "/server_info"})
    mrr = server_args.get("max_running_requests")
    if isinstance(mrr, int) and 0 < mrr < concurrency:
        source = "/server_info and the log" if sgl.MAX_RUNNING_WARNING in log_text else "/server_info"
        out.append(
            {
                "flag": "max-running-requests",
                "asked": expected.get("max-running-requests"),
                "running": mrr,
                "concurrency": concurrency,
                "why": "queue",
                "source": source,
            }
        )
    return out


# ---------------------------------------------------------------------------------------------- trials and studies
def trial_alarms(
    attrs: Mapping[str, Any],
    value: float | None,
    baseline_attrs: Mapping[str, Any] | None = None,
    baseline_value: float | None = None,
    *,
    server_env: Mapping[str, Any] | None = None,
    context: SlowContext | None = None,
) -> list[Alarm]:
    """Every alarm for one trial: ``value`` is its tok/s (None when it did not complete); ``server_env`` is the
    study's server environment (``R.SERVER_ENV``); ``context`` what the study knows beyond it (noise, PCIe)."""
    if attrs.get(R.BASELINE):
        return changed_settings(attrs.get(CHANGES_ATTR))
    flags = attrs.get(R.FLAGS) or {}
    base = baseline_attrs or {}
    greedy_meaningful = greedy_unchecked(attrs, server_env) is None
    found = [
        low_accept(flags, attrs.get(R.ACCEPT_LENGTH)),
        greedy_mismatch(attrs.get(GREEDY_ATTR), base.get(GREEDY_ATTR)) if greedy_meaningful else None,
        slower_than_baseline(
            flags,
            value,
            baseline_value,
            levels=attrs.get(R.LEVELS),
            baseline_levels=base.get(R.LEVELS),
            context=context,
        ),
    ]
    out = [a for a in found if a is not None]
    changes = list(attrs.get(CHANGES_ATTR) or [])
    attn, base_attn = attrs.get(ATTN_ATTR), base.get(ATTN_ATTR)
    if attn and base_attn and attn != base_attn and "attention-backend" not in flags:
        changes.append({"flag": "attention-backend", "asked": base_attn, "running": attn, "why": "baseline"})
    return out + changed_settings(changes)


def _baseline(trials: Sequence[Any]) -> Any:
    from optuna.trial import TrialState

    for t in trials:
        if t.user_attrs.get(R.BASELINE) and t.state == TrialState.COMPLETE and not t.user_attrs.get(R.DUPLICATE_OF):
            return t
    return None


def study_alarms(study: Any) -> dict[int, list[Alarm]]:
    """Alarms of every launched trial of a study, by trial number (trials without any are left out)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    base = _baseline(trials)
    out: dict[int, list[Alarm]] = {}
    for t in trials:
        if not t.user_attrs.get(R.LAUNCHED):
            continue  # never ran (infeasible before launch, duplicate): nothing was measured
        value = t.value if t.state == TrialState.COMPLETE and t.user_attrs.get(R.OUTCOME) == R.COMPLETE else None
        found = for_trial(
            t, base, value, server_env=study.user_attrs.get(R.SERVER_ENV), context=slow_context(study, t, base)
        )
        if found:
            out[t.number] = found
    return out


def slow_context(study: Any, frozen: Any, baseline: Any) -> SlowContext:
    """The launch noise the study measured (else the prior), whether the trial's host is PCIe-only, and the best
    completed launch of the same tree (algorithm, steps, topk, draft tokens) with other settings that beat the
    baseline by more than the noise."""
    from optuna.trial import TrialState

    noise = study.user_attrs.get(R.LAUNCH_NOISE)
    sigma = noise.get("sigma") if isinstance(noise, Mapping) else None
    ctx_noise = float(sigma) if isinstance(sigma, (int, float)) and sigma > 0 else NOISE_PRIOR
    facts = frozen.user_attrs.get(R.HOST_FACTS)
    pcie = bool(isinstance(facts, Mapping) and facts.get(R.PCIE_ONLY))
    flags = frozen.user_attrs.get(R.FLAGS) or {}
    win = None
    if baseline is not None and baseline.value and speculative(flags) is not None:
        tree = (speculative(flags), *sgl.resolved_triple(flags))
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            other = t.user_attrs.get(R.FLAGS) or {}
            if t.number == frozen.number or t.value is None or speculative(other) is None:
                continue
            if t.user_attrs.get(R.OUTCOME) != R.COMPLETE or (speculative(other), *sgl.resolved_triple(other)) != tree:
                continue
            gain = t.value / baseline.value - 1.0
            if gain > 2 * ctx_noise and (win is None or gain > win[2]):
                win = (t.number, str(t.user_attrs.get(R.CONFIG) or ""), gain)
    env = frozen.user_attrs.get(R.ENV) or {}
    untuned = not any(env.get(k) not in (None, "unset") for k in ("NCCL_PROTO", "NCCL_ALGO"))
    return SlowContext(noise=ctx_noise, pcie_only=pcie, same_tree_win=win, nccl_untuned=untuned)


def for_trial(
    frozen: Any,
    baseline: Any,
    value: float | None = None,
    *,
    server_env: Mapping[str, Any] | None = None,
    context: SlowContext | None = None,
) -> list[Alarm]:
    base_value = baseline.value if baseline is not None else None
    base_attrs = baseline.user_attrs if baseline is not None else None
    return trial_alarms(frozen.user_attrs, value, base_attrs, base_value, server_env=server_env, context=context)


def alarms_of(study: Any, frozen: Any) -> list[Alarm]:
    """One trial's alarms, with the study's baseline found in storage."""
    from optuna.trial import TrialState

    value = (
        frozen.value if frozen.state == TrialState.COMPLETE and frozen.user_attrs.get(R.OUTCOME) == R.COMPLETE else None
    )
    base = _baseline(study.get_trials(deepcopy=False))
    return for_trial(
        frozen, base, value, server_env=study.user_attrs.get(R.SERVER_ENV), context=slow_context(study, frozen, base)
    )


def greedy_note_of(study: Any, frozen: Any) -> str | None:
    """:func:`greedy_unchecked` for one trial of a study."""
    return greedy_unchecked(frozen.user_attrs, study.user_attrs.get(R.SERVER_ENV))
