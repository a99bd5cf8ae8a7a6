"""Fatal log lines that implicate one setting alone, so a study pays for such a setting once.

Each rule is a pattern on a server log line and a function naming the single setting (environment variable or
flag, and its value) the line proves fatal, or None when the line does not single one out. The driver blames a
failed trial only when the candidate holds that very value, records it on the trial, and from then on records
every candidate holding it as a constraint violation without a launch.

Keep a rule here only when the setting is fatal whatever else the configuration holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: NCCL's collectives and the algorithms that implement them (NCCL 2.2x ``src/enqueue.cc`` / ``tuning.cc``): a
#: collective none of whose algorithms NCCL_ALGO allows has no algorithm at all, whatever NCCL_PROTO says.
NCCL_ALGOS_BY_FUNCTION: dict[str, frozenset[str]] = {
    "AllReduce": frozenset({"RING", "TREE", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE"}),
    "AllGather": frozenset({"RING", "COLLNETDIRECT", "NVLS", "PAT"}),
    "ReduceScatter": frozenset({"RING", "COLLNETDIRECT", "NVLS", "PAT"}),
    "Broadcast": frozenset({"RING"}),
    "Reduce": frozenset({"RING"}),
}

# NCCL: WARN("Error : no algorithm/protocol available for function %s with datatype %s.%s%s", ..., " NCCL_ALGO was
# set to %s.", " NCCL_PROTO was set to %s.") -- each suffix only when that variable is set.
_NCCL_NO_ALGO = re.compile(
    r"NCCL WARN Error : no algorithm/protocol available for function (?P<function>\w+) with datatype \w+\."
    r"(?: NCCL_ALGO was set to (?P<algo>[^\s]+?)\.)?(?: NCCL_PROTO was set to (?P<proto>[^\s]+?)\.)?\s*$"
)


def _nccl_no_algorithm(m: re.Match[str]) -> tuple[str, str] | None:
    algo, proto = m.group("algo"), m.group("proto")
    if algo:
        # a plain algorithm list ("Tree", "Ring,Tree"); per-function forms ("allreduce:tree") are not judged
        allowed = {a.strip().upper().replace("_", "") for a in algo.lstrip("^").split(",")}
        supports = NCCL_ALGOS_BY_FUNCTION.get(m.group("function"))
        if ":" not in algo and not algo.startswith("^") and supports is not None and not allowed & supports:
            return ("NCCL_ALGO", algo)
    if algo and not proto:
        return ("NCCL_ALGO", algo)
    if proto and not algo:
        return ("NCCL_PROTO", proto)
    return None  # both set and the algorithm alone does not explain it: the pair is to blame, not one setting


@dataclass(frozen=True)
class FatalRule:
    name: str
    pattern: re.Pattern[str]
    blame: Callable[[re.Match[str]], tuple[str, str] | None]


RULES: tuple[FatalRule, ...] = (FatalRule("nccl-no-algorithm", _NCCL_NO_ALGO, _nccl_no_algorithm),)

#: cheap pre-filter for scanning a whole server log
NEEDLES = ("no algorithm/protocol available",)


def evidence(lines: Iterable[str], limit: int = 8) -> list[str]:
    """The log lines any rule could use (kept with a trial's result, so a remote host's log need not travel)."""
    out: list[str] = []
    for line in lines:
        if any(n in line for n in NEEDLES) and line.strip() not in out:
            out.append(line.strip())
            if len(out) >= limit:
                break
    return out


def blame(lines: Iterable[str], flags: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str] | None:
    """The single setting the log proves fatal, if the candidate holds it: {name, value, line, rule}."""
    for line in lines:
        for rule in RULES:
            m = rule.pattern.search(line.strip())
            if not m:
                continue
            found = rule.blame(m)
            if found is None:
                continue
            name, value = found
            held = env.get(name) if name.isupper() else flags.get(name)
            if held is not None and str(held) == value:
                return {"name": name, "value": value, "line": line.strip()[:500], "rule": rule.name}
    return None


def holds(setting: Mapping[str, str], flags: Mapping[str, Any], env: Mapping[str, str]) -> bool:
    name, value = setting["name"], setting["value"]
    held = env.get(name) if name.isupper() else flags.get(name)
    return held is not None and str(held) == value
