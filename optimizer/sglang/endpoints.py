"""The HTTP endpoints of an SGLang server the project uses or the simulator serves (docs/sglang.md). SGLang 0.5.17
still answers the ``get_*`` spellings, with a deprecation warning in its log."""

from __future__ import annotations

HEALTH = "/health"  # 503 while warming up, 200 once ready (runs a 1-token generation: about 1 s)
HEALTH_GENERATE = "/health_generate"
CHAT_COMPLETIONS = "/v1/chat/completions"  # OpenAI-compatible, streamed: what the benchmark sends
COMPLETIONS = "/v1/completions"
MODELS = "/v1/models"
GENERATE = "/generate"  # SGLang's native endpoint (its own warm-up request)
MODEL_INFO = "/model_info"
GET_MODEL_INFO = "/get_model_info"  # deprecated spelling
SERVER_INFO = "/server_info"  # avg_spec_accept_length, last_gen_throughput, the server args
GET_SERVER_INFO = "/get_server_info"  # deprecated spelling
LOAD = "/get_load"
LOADS = "/v1/loads"
FLUSH_CACHE = "/flush_cache"
METRICS = "/metrics"  # Prometheus text
