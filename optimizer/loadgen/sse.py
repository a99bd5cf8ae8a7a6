"""Reads an OpenAI-style SSE stream from SGLang without parsing every event as JSON.

The benchmark needs only three things from the stream: when each chunk with output text arrived, the final
`usage` chunk, and whether the stream is well formed. Content chunks are recognised by a byte search for
SGLang's compact key layout; only the usage chunk, error events and events in an unfamiliar layout go
through `json.loads`. That keeps the client's cost per chunk to a few microseconds, so the client is not what
limits a fast server.
"""

from __future__ import annotations

import json

_CHAT_KEYS = (b'"content":"', b'"reasoning_content":"')
_TEXT_KEYS = (b'"text":"',)


class SSEStream:
    """Feed it the raw body bytes as they arrive; read the outcome from its fields."""

    __slots__ = ("_buf", "_keys", "_json_field", "arrivals", "done", "error", "usage", "events")

    def __init__(self, endpoint: str = "chat") -> None:
        self._buf = b""
        self._keys = _CHAT_KEYS if endpoint == "chat" else _TEXT_KEYS
        self._json_field = "delta" if endpoint == "chat" else "text"
        self.arrivals: list[float] = []  # arrival time of every chunk that carried output text
        self.done = False  # saw data: [DONE]
        self.error = ""  # "reason: detail" once the stream is known to be bad
        self.usage: dict | None = None
        self.events = 0

    def feed(self, data: bytes, t: float) -> None:
        """Consume bytes that arrived at time t. Stops at [DONE] or the first error."""
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        parts = buf.split(b"\n\n")
        self._buf = parts.pop()
        for ev in parts:
            if not ev:
                continue
            self.events += 1
            if ev[:6] == b"data: " and b"\n" not in ev:
                payload = ev[6:]
            else:
                payload = self._payload(ev)
                if payload is None:
                    continue  # comment, event:, id: or retry: only
            if not self._event(payload, t):
                return

    @staticmethod
    def _payload(ev: bytes) -> bytes | None:
        lines = [ln[5:].lstrip(b" ") if ln[:5] == b"data:" else None for ln in ev.split(b"\n") if ln and ln[:1] != b":"]
        data = [ln for ln in lines if ln is not None]
        return b"\n".join(data) if data else None

    def _event(self, payload: bytes, t: float) -> bool:
        if self.done:
            self.error = "after_done: data after [DONE]"
            return False
        if payload[:1] != b"{" or payload[-1:] != b"}":
            if payload.strip() == b"[DONE]":
                self.done = True
                return False
            self.error = f"non_json: data line is not JSON: {payload[:80]!r}"
            return False
        if b'"usage":{' in payload or b'"error"' in payload or self.events == 1:
            return self._slow(payload, t)
        for key in self._keys:
            i = payload.find(key)
            if i >= 0 and payload[i + len(key) : i + len(key) + 1] != b'"':
                self.arrivals.append(t)
                return True
        if b'": ' in payload:  # spaced JSON from another server: the byte search above cannot see it
            return self._slow(payload, t)
        return True

    def _slow(self, payload: bytes, t: float) -> bool:
        """Full parse: the first event, the usage chunk, error events and unfamiliar layouts."""
        try:
            obj = json.loads(payload)
        except ValueError as e:
            self.error = f"non_json: data line is not valid JSON ({e}): {payload[:80]!r}"
            return False
        if not isinstance(obj, dict):
            self.error = f"non_json: data line is not a JSON object: {payload[:80]!r}"
            return False
        if "error" in obj or obj.get("object") == "error":
            err = obj.get("error", obj)
            msg = err.get("message", err) if isinstance(err, dict) else err
            self.error = f"server_error: {str(msg)[:200]}"
            return False
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        for ch in obj.get("choices") or ():
            if not isinstance(ch, dict):
                continue
            if self._json_field == "delta":
                d = ch.get("delta") or {}
                text = (d.get("content") or "") + (d.get("reasoning_content") or "") if isinstance(d, dict) else ""
            else:
                text = ch.get("text") or ""
            if text:
                self.arrivals.append(t)
                break
        return True
