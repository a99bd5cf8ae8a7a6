"""SGLang's own rules for speculative-decoding flags, as pure functions (docs/sglang.md).

Both the optimizer (to avoid spending a restart on a configuration SGLang rejects) and the simulator (to fail
exactly as SGLang fails) use these. Source: ``sglang/srt/arg_groups/speculative_hook.py`` (``_handle_eagle_family``,
``_auto_choose_speculative_params``) and ``server_args.py``; messages are SGLang's own text.

Flags are a mapping of SGLang flag names without the leading dashes (``speculative-num-steps``) to values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import adaptive

ALGO = "speculative-algorithm"
STEPS = "speculative-num-steps"
TOPK = "speculative-eagle-topk"
DRAFT = "speculative-num-draft-tokens"
DRAFT_PATH = "speculative-draft-model-path"
ATTN = "attention-backend"
PAGE = "page-size"
ADAPTIVE = adaptive.FLAG  # --speculative-adaptive (store-true)
ADAPTIVE_CONFIG = adaptive.CONFIG_FLAG  # --speculative-adaptive-config FILE.json

SPEC_TRIPLE = (STEPS, TOPK, DRAFT)
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")
KNOWN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# Architectures for which SGLang auto-chooses (5, 4, 8) instead of (3, 1, 4).
BIG_TREE_ARCHS = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")
PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")

TOPK1_WARNING = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
MAX_RUNNING_WARNING = "Max running requests is reset to 48 for speculative decoding."


@dataclass(frozen=True)
class Violation:
    """A rule SGLang enforces at start-up: exc is the exception type it raises, message its text."""

    rule: str
    exc: str
    message: str


def algorithm(flags: Mapping[str, Any]) -> str | None:
    """The speculative algorithm SGLang will run, upper-cased, NEXTN mapped to EAGLE; None = no speculation."""
    value = flags.get(ALGO)
    if value is None:
        return None
    text = str(value).strip().upper()
    if text in ("", "NONE", "UNSET"):
        return None
    return "EAGLE" if text == "NEXTN" else text


def auto_triple(architecture: str | None, algo: str | None = "EAGLE3") -> tuple[int, int, int]:
    """SGLang's ``_auto_choose_speculative_params``."""
    if algo == "STANDALONE":
        return (3, 1, 4)
    if architecture in BIG_TREE_ARCHS:
        return (5, 4, 8)
    return (3, 1, 4)


def startup_violations(
    flags: Mapping[str, Any], *, architecture: str | None = None, gpu_sm: int = 90
) -> list[Violation]:
    """The errors SGLang raises while parsing arguments, in the order it raises them (first one wins there)."""
    algo = algorithm(flags)
    out: list[Violation] = []
    attn = flags.get(ATTN)
    if attn == "trtllm_mha" and gpu_sm < 100:
        # On Hopper this fires before the topk check (recorded on an H200, launch D1).
        out.append(
            Violation(
                "trtllm_mha_needs_sm100",
                "ValueError",
                "TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100). "
                "Please use a different prefill backend.",
            )
        )
    if algo is None:
        return out
    if algo not in KNOWN_ALGORITHMS:
        out.append(Violation("unknown_algorithm", "ValueError", f"Unknown speculative algorithm: {algo}"))
        return out
    adaptive_on = adaptive.effective(flags, algo)
    if adaptive_on:
        # SGLang loads the adaptive config and checks the step count before the EAGLE handler runs.
        v = adaptive_violation(flags)
        if v is not None:
            out.append(v)
            return out
    if algo in EAGLE_FAMILY:
        if algo in ("EAGLE", "EAGLE3") and not flags.get(DRAFT_PATH):
            out.append(
                Violation(
                    "draft_model_required",
                    "ValueError",
                    "speculative_draft_model_path is required for EAGLE/EAGLE3 speculative decoding.",
                )
            )
        given = [flags.get(k) is not None for k in SPEC_TRIPLE]
        if any(given) and not all(given) and flags.get(STEPS) is None and not adaptive_on:
            # SGLang: assert speculative_eagle_topk is None and speculative_num_draft_tokens is None (bare).
            out.append(Violation("partial_triple", "AssertionError", ""))
            return out
        steps, topk, draft = resolved_triple(flags, architecture=architecture)
        if steps < 1 or topk < 1 or draft < 1:
            out.append(
                Violation(
                    "triple_range",
                    "ValueError",
                    f"speculative_num_steps={steps}, speculative_eagle_topk={topk} and "
                    f"speculative_num_draft_tokens={draft} must all be positive.",
                )
            )
        if attn == "trtllm_mha" and topk > 1:
            out.append(
                Violation(
                    "trtllm_mha_topk1",
                    "ValueError",
                    "trtllm_mha backend only supports topk = 1 for speculative decoding.",
                )
            )
        page = int(flags.get(PAGE) or 1)
        if topk > 1 and page > 1 and attn not in PAGE_TREE_SPEC_BACKENDS:
            out.append(
                Violation(
                    "page_tree_backend",
                    "ValueError",
                    "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results "
                    "for paged attention backends. This combination is only supported for the 'flashinfer' "
                    "backend.",
                )
            )
    return out


def adaptive_violation(flags: Mapping[str, Any]) -> Violation | None:
    """SGLang's error while loading the adaptive config or placing the step count in it, or None."""
    path = flags.get(adaptive.CONFIG_FLAG)
    try:
        adaptive.resolve(flags, adaptive.config_of(flags))
    except adaptive.AdaptiveConfigError as exc:
        return Violation("adaptive_config", "ValueError", str(exc))
    except FileNotFoundError:
        return Violation("adaptive_config", "FileNotFoundError", f"[Errno 2] No such file or directory: {path!r}")
    except json.JSONDecodeError as exc:
        return Violation("adaptive_config", "json.decoder.JSONDecodeError", str(exc))
    except (AttributeError, OSError, TypeError) as exc:
        return Violation("adaptive_config", type(exc).__name__, str(exc))
    return None


def adaptive_config(flags: Mapping[str, Any]) -> adaptive.AdaptiveConfig | None:
    """The adaptive config SGLang will run with these flags, or None (adaptive off, unsupported or invalid)."""
    if not adaptive.effective(flags, algorithm(flags)) or adaptive_violation(flags) is not None:
        return None
    return adaptive.config_of(flags)


def resolved_triple(flags: Mapping[str, Any], *, architecture: str | None = None) -> tuple[int, int, int]:
    """The (steps, topk, draft tokens) SGLang will actually run, after auto-choice and the topk-1 rewrite (under
    adaptive mode: the initial step count, topk 1, steps + 1)."""
    algo = algorithm(flags)
    cfg = adaptive_config(flags) if adaptive.requested(flags) else None
    if cfg is not None:
        return adaptive.resolve(flags, cfg)
    if flags.get(STEPS) is None:
        steps, topk, draft = auto_triple(architecture, algo)
    else:
        steps = int(flags[STEPS])
        topk = int(flags.get(TOPK) if flags.get(TOPK) is not None else 1)
        draft = int(flags.get(DRAFT) if flags.get(DRAFT) is not None else steps + 1)
    if topk == 1:
        draft = steps + 1
    return steps, topk, draft


def tree_limit(steps: int, topk: int) -> int:
    """The most draft tokens beyond the root a tree of ``steps`` levels and ``topk`` branches can verify:
    ``topk + (steps - 1) * topk^2`` (SGLang's ``organize_draft_results``; not checked at start-up, the server dies
    when a request first needs the tree)."""
    return topk + (steps - 1) * topk * topk


def runtime_limit_ok(steps: int, topk: int, draft: int) -> bool:
    """SGLang's runtime limit: ``draft - 1 <= tree_limit(steps, topk)``."""
    return draft - 1 <= tree_limit(steps, topk)


def bench_speculative_ok(steps: int, topk: int, draft: int) -> bool:
    """The stricter rule ``scripts/playground/bench_speculative.py`` uses to build its grid."""
    return draft <= steps * topk + 1


def normalize(flags: Mapping[str, Any], *, architecture: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Flags as SGLang will run them, plus the warnings SGLang logs while rewriting them.

    Without speculation every speculative flag is dropped (SGLang ignores them); NEXTN becomes EAGLE; the triple
    is filled from SGLang's auto choice; topk 1 forces draft tokens to steps + 1.
    """
    out = {k: v for k, v in flags.items() if v is not None and v is not False}
    warnings: list[str] = []
    algo = algorithm(flags)
    if algo is None:
        for key in list(out):
            if key.startswith("speculative-"):
                del out[key]
        return out, warnings
    out[ALGO] = algo
    if adaptive.requested(flags):
        reason = adaptive.unsupported_reason(flags, algo)
        if reason is not None:
            warnings.append(adaptive.DISABLED_WARNING.format(reason=reason))
            out.pop(adaptive.FLAG, None)
            out.pop(adaptive.CONFIG_FLAG, None)
            flags = {k: v for k, v in flags.items() if k not in (adaptive.FLAG, adaptive.CONFIG_FLAG)}
        else:
            out[adaptive.FLAG] = True
    else:
        out.pop(adaptive.CONFIG_FLAG, None)  # SGLang reads the file only in adaptive mode
    if algo in EAGLE_FAMILY:
        given_draft = flags.get(DRAFT)
        steps, topk, draft = resolved_triple(flags, architecture=architecture)
        if topk == 1 and given_draft is not None and int(given_draft) != draft and not adaptive.requested(flags):
            warnings.append(TOPK1_WARNING)
        out[STEPS], out[TOPK], out[DRAFT] = steps, topk, draft
        if flags.get("max-running-requests") is None:
            warnings.append(MAX_RUNNING_WARNING)
    return out, warnings
