"""What the benchmark sends: the workload settings, the prompts, and which prompt goes into which chunk.

The plan is deterministic: the same workload gives the same prompts to chunk i in every trial, so a pruner can
compare chunk i of one trial with chunk i of another.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pydantic

from optimizer.errors import ConfigError

BUILTIN_PATH = Path(__file__).parent / "prompts" / "builtin.jsonl"
# British spelling from the issue is accepted as an alias of the file's own category name.
_CATEGORY_ALIASES = {"summarisation": "summarization"}


class Workload(pydantic.BaseModel):
    """One benchmark run: which prompts, which endpoint, how many requests, at which concurrency levels.

    ``concurrency`` is one level (``8``) or a list of load levels (``[1, 8, 32, 64]``) that one boot measures in
    turn, each with its own paired chunks (``levels``, ``for_level``). With several levels a chunk at
    level c holds ``max(requests_per_chunk, c)`` requests, so every level really runs at its concurrency.
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    prompts: str = "builtin"
    categories: list[str] | None = None
    endpoint: Literal["chat", "completions"] = "chat"
    concurrency: int | list[int] = 1
    max_tokens: int = pydantic.Field(128, ge=1)
    warmup_requests: int = pydantic.Field(2, ge=0)
    chunks: int = pydantic.Field(4, ge=1)
    requests_per_chunk: int = pydantic.Field(8, ge=1)
    temperature: float = pydantic.Field(0.0, ge=0.0)
    ignore_eos: bool = True
    request_timeout_s: float = pydantic.Field(120.0, gt=0)
    stall_timeout_s: float = pydantic.Field(30.0, gt=0)
    seed: int = 0
    # Our simulator picks its acceptance by prompt category; real SGLang ignores unknown body fields
    # (its request models allow extras), so sending it is harmless. Off switch for stricter servers.
    send_category: bool = True

    @pydantic.field_validator("concurrency")
    @classmethod
    def _levels_valid(cls, v: int | list[int]) -> int | list[int]:
        levels = v if isinstance(v, list) else [v]
        if not levels:
            raise ValueError("must name at least one concurrency level, e.g. 8 or [1, 8, 32]")
        if any(c < 1 for c in levels):
            raise ValueError("concurrency levels must be >= 1")
        if len(set(levels)) != len(levels):
            raise ValueError(f"concurrency levels must differ; got {levels}")
        return v[0] if isinstance(v, list) and len(v) == 1 else v

    @property
    def levels(self) -> list[int]:
        """The load levels in the order the user gave them."""
        return list(self.concurrency) if isinstance(self.concurrency, list) else [self.concurrency]

    @property
    def multi_level(self) -> bool:
        return isinstance(self.concurrency, list)

    def for_level(self, level: int) -> Workload:
        """The workload of one level (a single concurrency); the same level gives the same plan in every trial."""
        if not self.multi_level:
            return self
        return self.model_copy(update={"concurrency": level, "requests_per_chunk": max(self.requests_per_chunk, level)})

    @pydantic.field_validator("categories")
    @classmethod
    def _categories_not_empty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v:
                raise ValueError("must name at least one category, or be left out for all")
            v = [_CATEGORY_ALIASES.get(c, c) for c in v]
        return v

    @classmethod
    def from_dict(cls, data: dict, *, file: str | None = None) -> Workload:
        """Validate user input; a bad field becomes a ConfigError naming the file and key."""
        try:
            return cls.model_validate(data)
        except pydantic.ValidationError as e:
            errs = e.errors()
            key = ".".join(str(p) for p in errs[0].get("loc", ())) or None
            msgs = []
            for err in errs:
                where = ".".join(str(p) for p in err.get("loc", ()))
                if err.get("type") == "extra_forbidden":
                    msg = f"unknown field; allowed: {', '.join(sorted(cls.model_fields))}"
                else:
                    msg = err.get("msg", "invalid")
                msgs.append(msg if where == key else f"{where}: {msg}")
            raise ConfigError("; ".join(msgs), file=file, key=key) from None


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    messages: list[dict] | None = None
    text: str | None = None

    def as_messages(self) -> list[dict]:
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.text or ""}]

    def as_text(self) -> str:
        if self.text is not None:
            return self.text
        return "\n\n".join(str(m.get("content", "")) for m in self.messages or [])


def _bad(file: Path, line: int | None, msg: str) -> ConfigError:
    where = f"line {line}" if line is not None else None
    return ConfigError(msg, file=str(file), key=where)


_ALLOWED_LINE = (
    'each line must be a JSON object with "prompt": str or "messages": [{"role", "content"}, ...], '
    'and optionally "category": str and "id"'
)


def _valid_messages(m) -> bool:
    return (
        isinstance(m, list)
        and len(m) > 0
        and all(isinstance(x, dict) and isinstance(x.get("role"), str) and isinstance(x.get("content"), str) for x in m)
    )


def _load_jsonl(path: Path) -> list[Prompt]:
    out: list[Prompt] = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise _bad(path, n, f"not valid JSON ({e.msg}); {_ALLOWED_LINE}") from None
            if not isinstance(obj, dict):
                raise _bad(path, n, f"not a JSON object; {_ALLOWED_LINE}")
            cat = obj.get("category", "user")
            if not isinstance(cat, str) or not cat:
                raise _bad(path, n, '"category" must be a non-empty string')
            pid = str(obj.get("id", f"{path.stem}-{n}"))
            if "messages" in obj:
                if not _valid_messages(obj["messages"]):
                    raise _bad(path, n, '"messages" must be a non-empty list of {"role": str, "content": str}')
                out.append(Prompt(pid, cat, messages=obj["messages"]))
            elif "prompt" in obj:
                if not isinstance(obj["prompt"], str) or not obj["prompt"]:
                    raise _bad(path, n, '"prompt" must be a non-empty string')
                out.append(Prompt(pid, cat, text=obj["prompt"]))
            else:
                raise _bad(path, n, f'neither "prompt" nor "messages"; {_ALLOWED_LINE}')
    return out


def _load_sharegpt(path: Path) -> list[Prompt]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise _bad(
            path,
            e.lineno,
            f"not valid JSON ({e.msg}); expected a ShareGPT list of "
            '{"conversations": [{"from": "human", "value": str}, ...]}',
        ) from None
    if not isinstance(data, list):
        raise ConfigError(
            'expected a ShareGPT list of {"conversations": [{"from": "human", "value": str}, ...]}', file=str(path)
        )
    out: list[Prompt] = []
    for i, item in enumerate(data):
        conv = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(conv, list):
            raise ConfigError('entry has no "conversations" list', file=str(path), key=f"entry {i}")
        # The first human turn is the prompt, as in sglang.bench_serving; entries without one are skipped.
        first = next(
            (
                t
                for t in conv
                if isinstance(t, dict)
                and t.get("from") in ("human", "user")
                and isinstance(t.get("value"), str)
                and t["value"]
            ),
            None,
        )
        if first is None:
            continue
        pid = str(item.get("id", f"{path.stem}-{i}"))
        out.append(
            Prompt(pid, str(item.get("category", "sharegpt")), messages=[{"role": "user", "content": first["value"]}])
        )
    return out


def load_prompts(w: Workload, base_dir: Path | None = None) -> list[Prompt]:
    """Read the prompt set named by the workload and keep the chosen categories."""
    if w.prompts == "builtin":
        path = BUILTIN_PATH
    else:
        path = Path(w.prompts).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
    if not path.is_file():
        raise ConfigError(
            f'prompt file not found: {path}; use "builtin", a .jsonl or a ShareGPT .json file', key="prompts"
        )
    if path.suffix == ".json":
        prompts = _load_sharegpt(path)
    elif path.suffix == ".jsonl":
        prompts = _load_jsonl(path)
    else:
        raise ConfigError(
            'unknown prompt file type; allowed: "builtin", *.jsonl, ShareGPT *.json', file=str(path), key="prompts"
        )
    if w.categories is not None:
        have = sorted({p.category for p in prompts})
        unknown = [c for c in w.categories if c not in have]
        if unknown:
            raise ConfigError(
                f"unknown categories {unknown}; this prompt set has {have}", file=str(path), key="categories"
            )
        wanted = set(w.categories)
        prompts = [p for p in prompts if p.category in wanted]
    if not prompts:
        raise ConfigError("no prompts in this file", file=str(path), key="prompts")
    return prompts


def _interleave(prompts: list[Prompt], seed: int) -> list[Prompt]:
    """Shuffle within each category, then deal the categories round-robin so each chunk gets a mix."""
    rng = random.Random(seed)
    by_cat: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    queues = []
    for cat in sorted(by_cat):
        q = list(by_cat[cat])
        rng.shuffle(q)
        queues.append(q)
    out: list[Prompt] = []
    for i in range(max(len(q) for q in queues)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def chunk_plan(w: Workload, prompts: list[Prompt]) -> tuple[list[Prompt], list[list[Prompt]]]:
    """Warmup prompts and one prompt list per chunk, cycling the prompts when there are too few.

    Chunks take prompts from the front of the ordered list and warmup from the back, so the warmup count
    never shifts which prompts a chunk gets.
    """
    if not prompts:
        raise ConfigError("no prompts to plan with", key="prompts")
    order = _interleave(prompts, w.seed)
    n = len(order)
    warmup = [order[-1 - (i % n)] for i in range(w.warmup_requests)]
    chunks = [[order[(c * w.requests_per_chunk + j) % n] for j in range(w.requests_per_chunk)] for c in range(w.chunks)]
    return warmup, chunks
