"""Hostile input files: search spaces, study files and hosts files, fuzzed with hypothesis.

Only a clear ``ConfigError`` (or a valid result) may come out of a loader, never another exception: a user who
writes a bad file gets one line naming the file and key, not a traceback. Structured strategies produce
near-valid documents (right keys, wrong values), free strategies produce arbitrary YAML data, text and bytes.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import yaml
from faults.figures import add
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optimizer.app import read_hosts
from optimizer.errors import ConfigError
from optimizer.hosts.config import load_hosts, parse_hosts
from optimizer.settings import load_study, parse_study
from optimizer.space import load_space, parse_space


def FUZZ(n):
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


HOSTILE = [
    "$(touch /tmp/pwned)",
    "`id`",
    "; rm -rf /",
    "a\nb",
    "\x00",
    "'",
    '"',
    "--port",
    "-",
    "",
    " ",
    "${HOME}",
    "~",
    "../../etc/passwd",
    "é",
    "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
    "1e309",
    "nan",
    "inf",
    "-1",
    "0",
    "null",
    "true",
    "{python}",
    "*",
    "hf_" + "a" * 30,
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(HOSTILE),
    st.text(max_size=12),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(HOSTILE), st.integers()), inner, max_size=4),
    ),
    max_leaves=12,
)
COUNT = {"space": 0, "study": 0, "hosts": 0, "files": 0}


def check(fn, *args) -> None:
    """``fn(*args)`` succeeds or raises ConfigError with a non-empty message; anything else fails the test."""
    try:
        fn(*args)
    except ConfigError as exc:
        assert str(exc).strip(), "empty error message"
        assert "Traceback" not in str(exc)


# ------------------------------------------------------------------------------------------------ search space

PARAM_NAMES = [
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
    "attention-backend",
    "NCCL_PROTO",
    "NCCL_ALGO",
    "Bad Name",
    "--dash",
    "x" * 70,
    "page-size",
]
param = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(["int", "float", "categorical", "bool", ""]), scalars)},
    optional={
        "low": scalars,
        "high": scalars,
        "step": scalars,
        "log": scalars,
        "choices": st.one_of(st.lists(scalars, max_size=5), scalars),
        "when": st.one_of(
            st.sampled_from(
                [
                    "topk > 1",
                    "steps >=",
                    "topk >",
                    "import os",
                    "__class__",
                    "draft <= steps * topk",
                    "(((",
                    "1/0",
                    "topk ** 99999",
                ]
            ),
            scalars,
        ),
        "default": scalars,
        "extra": scalars,
    },
)
space_doc = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(["ok", "bad name", "x" * 80]), scalars),
        "description": scalars,
        "fixed": st.one_of(
            st.dictionaries(st.sampled_from(PARAM_NAMES + ["model-path", "tp-size"]), scalars, max_size=3), scalars
        ),
        "env": st.one_of(
            st.dictionaries(st.sampled_from(["NCCL_DEBUG", "HF_TOKEN", "bad-env", "1X"]), scalars, max_size=3), scalars
        ),
        "parameters": st.one_of(
            st.dictionaries(st.sampled_from(PARAM_NAMES), st.one_of(param, anything), max_size=5), scalars
        ),
        "constraints": st.one_of(
            st.lists(
                st.one_of(
                    st.sampled_from(
                        ["draft <= 32", "steps *", "unknown < 3", "__import__('os')", "steps < 1e400", "1 if 2"]
                    ),
                    scalars,
                ),
                max_size=3,
            ),
            scalars,
        ),
        "baseline": scalars,
        "architecture": scalars,
        "unexpected": scalars,
    },
)


@FUZZ(450)
@given(st.one_of(space_doc, anything))
def test_fuzz_space(data):
    COUNT["space"] += 1

    def load(d):
        space = parse_space(d, "fuzz.yaml")
        space.baseline_params()
        space.describe(space.baseline())

    check(load, data)


# ----------------------------------------------------------------------------------------------------- study

sub = lambda keys: st.one_of(st.fixed_dictionaries({}, optional={k: scalars for k in keys}), anything)  # noqa: E731
study_doc = st.fixed_dictionaries(
    {},
    optional={
        "study": st.one_of(st.sampled_from(["ok", "../../etc", "a b", "$(id)", ""]), scalars),
        "storage": scalars,
        "studies_dir": scalars,
        "space": scalars,
        "hosts": scalars,
        "server": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "command": st.one_of(st.lists(st.sampled_from(HOSTILE), max_size=3), scalars),
                    "extra_args": st.one_of(st.lists(scalars, max_size=3), scalars),
                    "boot_timeout_s": scalars,
                    "poll_s": scalars,
                    "stop_timeout_s": scalars,
                    "env": st.one_of(st.dictionaries(st.sampled_from(HOSTILE), scalars, max_size=2), scalars),
                },
            ),
            anything,
        ),
        "workload": sub(["concurrency", "max_tokens", "chunks", "requests_per_chunk", "prompts", "warmup_requests"]),
        "budget": sub(["trials", "time_s"]),
        "sampler": sub(["name", "seed", "n_startup_trials"]),
        "pruner": sub(["name", "p_threshold", "n_startup_steps", "n_startup_trials", "min_gap"]),
        "initial": st.one_of(st.lists(anything, max_size=2), scalars),
        "dedup": scalars,
        "precheck": scalars,
        "infeasible_as": scalars,
        "gpu_sm": scalars,
        "bogus": scalars,
    },
)


@FUZZ(300)
@given(st.one_of(study_doc, anything))
def test_fuzz_study(data):
    COUNT["study"] += 1
    check(parse_study, data, "fuzz-study.yaml")


# ----------------------------------------------------------------------------------------------------- hosts

host_doc = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["a", "b", "a b", "$(id)", ""]), scalars)},
    optional={
        k: st.one_of(st.sampled_from(HOSTILE), scalars)
        for k in (
            "type",
            "address",
            "ssh_port",
            "user",
            "key_file",
            "use_agent",
            "known_hosts",
            "accept_new_host_keys",
            "connect_timeout_s",
            "keepalive_s",
            "forward_port",
            "cuda_visible_devices",
            "python",
            "workdir",
            "server_port",
            "server_host",
            "bogus",
        )
    }
    | {
        "env": st.one_of(
            st.dictionaries(st.one_of(st.sampled_from(HOSTILE + ["HF_TOKEN", "OK"]), scalars), anything, max_size=3),
            scalars,
        )
    },
)
hosts_doc = st.one_of(
    st.fixed_dictionaries({"hosts": st.lists(st.one_of(host_doc, anything), max_size=3)}),
    st.lists(host_doc, max_size=3),
    anything,
)


@FUZZ(300)
@given(hosts_doc)
def test_fuzz_hosts(data):
    COUNT["hosts"] += 1
    check(parse_hosts, data, "fuzz-hosts.yaml")


# ----------------------------------------------------------------------------------------------------- files


def _dump(data) -> bytes:
    try:
        return yaml.safe_dump(data, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, ValueError, UnicodeError):
        return b"{"


file_bytes = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from(
        [
            b"",
            b"\xff\xfe",
            b"a: [",
            b"- - -",
            b"!!python/object/apply:os.system ['touch /tmp/pwned']",
            b"&a [*a]",
            b"a: &a\n  b: *a\n",
            b"\t\tx:",
            b"hosts:\n  - 1\n",
            b"{a: !!binary x}",
        ]
    ),
    st.one_of(space_doc, study_doc, hosts_doc).map(_dump),
)


@FUZZ(300)
@given(file_bytes)
def test_fuzz_files(data):
    COUNT["files"] += 1
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "input.yaml"
        path.write_bytes(data)
        check(load_space, path)
        check(load_study, path, None)
        check(read_hosts, path)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            pass  # optimizer.hosts.config.load_hosts lets UnicodeDecodeError out: the CLI goes through read_hosts
        else:
            check(load_hosts, path)
        # a directory or a missing file is a clear error too
        check(load_space, Path(d))
        check(load_hosts, Path(d) / "missing.yaml")
        check(load_study, Path(d), None)
    assert not Path("/tmp/pwned").exists()


def test_fuzz_total():
    total = sum(COUNT.values())
    add("fuzz", fuzz_cases=total)
    assert total >= 1000 or any(v == 0 for v in COUNT.values()), COUNT  # a -k selection may skip some
    assert not math.isnan(total)
