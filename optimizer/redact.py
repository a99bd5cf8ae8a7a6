"""Secrets never reach logs, notes or exports: values of keys named like a token, password, secret or key are
replaced, and so are strings that look like bearer tokens or private keys."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Names like HF_TOKEN, api-key, DB_PASSWORD, aws_secret_access_key; not max-tokens or num-draft-tokens.
SECRET_KEY = re.compile(
    r"((^|[-_])(token|access[-_]?token|auth[-_]?token|api[-_]?key|apikey|secret|passwd|password|passphrase"
    r"|credentials?|private[-_]?key)([-_]|$))|(secret|password)",
    re.IGNORECASE,
)
SECRET_VALUE = re.compile(
    r"(-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
    r"|\bhf_[A-Za-z0-9]{20,}\b|\bsk-[A-Za-z0-9_-]{20,}\b|\bgh[pousr]_[A-Za-z0-9]{20,}\b"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{12,})"
)
MASK = "***"


def redact_text(text: str) -> str:
    return SECRET_VALUE.sub(MASK, text)


def redact_value(key: str, value: Any) -> Any:
    if SECRET_KEY.search(str(key)):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return redact_mapping(value)
    return value


def redact_mapping(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: redact_value(k, v) for k, v in data.items()}


# name=value / name: value / --name value pairs whose name looks like a secret (SGLang prints api_key=... in its
# server_args line; a launch command may carry --api-key).
_SECRET_NAME = r"[A-Za-z0-9_.-]*(?:token|passw\w*|secret|api[_-]?key|credential|private[_-]?key|auth(?:orization)?)"
_SECRET_PAIRS = (
    re.compile(rf"""(?P<k>\b{_SECRET_NAME})(?P<sep>\s*[=:]\s*)(?P<q>['"]?)(?P<v>[^\s'",)]+)(?P=q)""", re.IGNORECASE),
    re.compile(rf"""(?P<k>--{_SECRET_NAME})(?P<sep>\s+)(?P<q>['"]?)(?P<v>[^\s'"]+)(?P=q)""", re.IGNORECASE),
)
# Flag and attribute names that contain "token" or "auth" but hold no secret.
_NOT_SECRET = re.compile(r"tokens|tokenizer|author", re.IGNORECASE)


def redact_attrs(data: Mapping[str, Any]) -> dict[str, Any]:
    """``redact_mapping`` that leaves ``speculative-num-draft-tokens``, ``tokenizer-path`` and the like alone."""
    out = {}
    for k, v in data.items():
        if _NOT_SECRET.search(str(k)) and not isinstance(v, Mapping):
            out[k] = redact_text(v) if isinstance(v, str) else v
        else:
            out[k] = redact_mapping({k: v})[k]
    return out


def redact_log(text: str) -> str:
    """``redact_text`` plus ``name=value`` pairs whose name looks like a secret."""

    def pair(m: re.Match[str]) -> str:
        return f"{m.group('k')}{m.group('sep')}{m.group('q')}{MASK}{m.group('q')}"

    text = redact_text(text)
    for pattern in _SECRET_PAIRS:
        text = pattern.sub(pair, text)
    return text
