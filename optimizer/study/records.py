"""What the study records, by name: the user attributes the driver writes on trials and on the study (read back by
the notes, the report, the export, the pruner and the benchmarks), and the helpers that pick trials by them.

Names are stored in the study's storage: renaming a value here breaks reading older studies.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

# ---------------------------------------------------------------------- trial user attributes
BASELINE = "baseline"  # True on the parameterless baseline trial (never pruned, never re-queued)
BASELINE_PARAMS = "baseline_params"  # the space's values that mean "no speculation"
CONFIG = "config"  # the candidate described for humans (secrets masked)
CANDIDATE_KEY = "candidate_key"  # SGLang-normalised key: equal keys are duplicates
FLAGS = "flags"
ENV = "env"
HOST = "host"
LAUNCHED = "launched"  # True once a server was started for the trial: counts against the budget
T_START = "t_start"
T_END = "t_end"
BOOT_S = "boot_s"
BOOT_PHASES = "boot_phases"
STOP_S = "stop_s"  # seconds from SIGTERM until the server's process group was gone (optimizer/boot.py)
SEARCH_BOOT = "search_boot"  # the flags the search boot added to this launch (never part of the answer)
LOG_PATH = "log_path"
RECORDS_PATH = "records_path"
LOG_TAIL = "log_tail"
OUTCOME = "outcome"
FAILURE_KIND = "failure_kind"
FAILURE_REASON = "failure_reason"
DUPLICATE_OF = "duplicate_of"
REQUEUED_FROM = "requeued_from"
#: a stopped trial is re-queued once: a re-queued copy that stops again is not (a launch that kills the driver must
#: not loop); its failure reason says so (optimizer/study/resume.py, recording.py)
NOT_REQUEUED_AGAIN = "not re-queued a second time"
WARM_START = "warm_start"
PRUNED_AT_CHUNK = "pruned_at_chunk"
FATAL_SETTING = "fatal_setting"  # {name, value, line}: a setting this trial's log proved fatal on its own
SKIPPED_FOR_FATAL = "skipped_for_fatal"  # the learned fatal setting (and its trial) a candidate held
HOST_FAULT_PREFIX = "host_fault_"  # host_fault_<attempt>: "<host>: <reason>"
CONSTRAINT_PREFIX = "constraint:"  # mirrors trial.set_constraint: optuna-dashboard 0.21 does not show constraints
# Benchmark metrics are stored under their own names (optimizer.loadgen.client.BenchResult); these are read back.
TOK_PER_S = "tok_per_s"
ACCEPT_LENGTH = "accept_length"
#: verify steps that accepted 0, 1, 2, ... drafts, summed over the warm-up's native requests (SGLang's per-request
#: ``spec_correct_drafts_histogram``): for a chain, the accept length of every shorter chain
ACCEPT_HISTOGRAM = "accept_histogram"
# What the server and its host said about themselves after the benchmark (optimizer.probes; read by the alarms).
SERVER_CHANGES = "server_changes"  # [{flag, asked, running, source[, why, concurrency]}]
SERVER_ATTENTION_BACKEND = "server_attention_backend"
SERVER_VERSION = "server_version"
GREEDY_DIGESTS = "greedy_digests"  # prompt id -> digest of its greedy output's first characters
HOST_FACTS = "host_facts"  # {gpu, driver, cpu, load_1m, cpus, nccl, pcie_only}
PCIE_ONLY = "pcie_only"  # in HOST_FACTS: True when SGLang found more than two GPUs not all linked by NVLink
LEVELS = "levels"  # {"<concurrency>": {tok_per_s, ttft/itl/e2e percentiles, accept_length, complete, ...}}

# Values of OUTCOME.
COMPLETE = "complete"
PRUNED = "pruned"
INFEASIBLE = "infeasible"
FAILED = "failed"
DUPLICATE = "duplicate"
INTERRUPTED = "interrupted"

# ---------------------------------------------------------------------- study user attributes
OPTIMIZER_VERSION = "optimizer_version"
SERVER_COMMAND = "server_command"  # also on each launched trial: the command it ran (exports use what ran)
# server.env of the study file (secret-named values masked), rewritten on every run: every trial ran with it, so
# best.env carries it too.
SERVER_ENV = "server_env"
SPACE = "space"
SPACE_PARAMS = "space_params"  # the space's parameters as Optuna distributions: a resumed study must search the same
HOST_PYTHON = "host_python"  # host name -> the Python that ran {python} there (best.sh runs the same)
WORKLOAD = "workload"
CREATED = "created"
BASELINE_TOK_PER_S = "baseline_tok_per_s"
BASELINE_TRIAL = "baseline_trial"
PLAN = "plan"  # load levels, objective and latency limits (optimizer.levels.plan_record)
LAUNCH_NOISE = "launch_noise"  # {sigma, df, source}: the noise between launches, measured from relaunches
LAUNCH_NOISE_ESTIMATE = "search:launch_noise_estimate"  # the structured sampler's estimate, while none is measured
CONFIRM_PLAN = "confirm:plan"  # the configurations a confirmation relaunches (optimizer.confirm)
CONFIRM_RUN_PREFIX = "confirm:run:"  # confirm:run:NNNN, one relaunch each
CONFIRM_RESULT = "confirm:result"  # the verdict (optimizer.verdict)
ADAPTIVE_CONFIRM = "adaptive:confirm"  # the adaptive schedule's confirmation (optimizer.adaptive_confirm)
#: why the search stopped: {reason, text, launches, expected_gain, threshold} (optimizer.study.driver)
SEARCH_STOP = "search:stop"
#: the search's answer before any confirmation (optimizer.samplers.estimate): {trial, tok_per_s,
#: estimates: {"<trial>": tok/s}, history: [[ended trial, answer trial], ...]}, the throughput model's estimate of
#: every completed launch and the answer after each launch
ESTIMATE = "search:estimate"
RELAUNCH_RUN_PREFIX = "relaunch:run:"  # relaunch:run:NNNN, the baseline relaunched during the study (relaunch.py)


def constraint_attr(name: str) -> str:
    return CONSTRAINT_PREFIX + name


def host_fault_attr(attempt: int) -> str:
    return f"{HOST_FAULT_PREFIX}{attempt}"


def outcome(t: FrozenTrial) -> str:
    """The recorded outcome, or the Optuna state for a trial the driver did not settle."""
    return str(t.user_attrs.get(OUTCOME) or t.state.name.lower())


def feasible(t: FrozenTrial) -> bool:
    return t.state == TrialState.COMPLETE and t.value is not None and all(v <= 0 for v in t.constraints.values())


def answerable(t: FrozenTrial) -> bool:
    """Completed within the constraints and not a duplicate: a trial that can be the study's answer."""
    return feasible(t) and not t.user_attrs.get(DUPLICATE_OF)


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    done = [t for t in study.get_trials(deepcopy=False) if answerable(t)]
    return max(done, key=lambda t: t.value) if done else None  # type: ignore[arg-type, return-value]


def search_answer(study: optuna.Study) -> FrozenTrial | None:
    """The answer before any confirmation: the completed launch the search's model estimates fastest
    (``ESTIMATE``), else the fastest single launch."""
    est = study.user_attrs.get(ESTIMATE)
    number = est.get("trial") if isinstance(est, dict) else None
    if isinstance(number, int):
        trials = study.get_trials(deepcopy=False)
        if 0 <= number < len(trials) and answerable(trials[number]):
            return trials[number]
    return best_trial(study)


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(BASELINE) and answerable(t):
            return t
    return None


def launched_count(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get(LAUNCHED))


def measured_keys(study: optuna.Study) -> dict[str, FrozenTrial]:
    """Candidate key -> the first trial that measured it (completed or pruned, not itself a duplicate)."""
    out: dict[str, FrozenTrial] = {}
    for t in study.get_trials(deepcopy=False):
        key = t.user_attrs.get(CANDIDATE_KEY)
        if key and t.state in (TrialState.COMPLETE, TrialState.PRUNED) and not t.user_attrs.get(DUPLICATE_OF):
            out.setdefault(key, t)
    return out


def summary_rows(study: optuna.Study) -> list[dict[str, Any]]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs
        rows.append(
            {
                "trial": t.number,
                "config": ua.get(CONFIG, ""),
                "outcome": ua.get(OUTCOME, t.state.name.lower()),
                "tok_per_s": t.value if feasible(t) else None,
                "accept_length": ua.get(ACCEPT_LENGTH),
                "boot_s": ua.get(BOOT_S),
                "host": ua.get(HOST, ""),
                "reason": ua.get(FAILURE_REASON, "")
                or (f"duplicate of {ua[DUPLICATE_OF]}" if DUPLICATE_OF in ua else "")
                or ("queued, not launched: the search ended first" if t.state == TrialState.WAITING else ""),
            }
        )
    return rows
