"""Benchmark: workload files and the streaming client; per-chunk and final metrics as dataclasses."""

from optimizer.loadgen.client import BenchResult, ChunkResult, RequestRecord, run_benchmark
from optimizer.loadgen.workload import Prompt, Workload, chunk_plan, load_prompts

__all__ = [
    "BenchResult",
    "ChunkResult",
    "Prompt",
    "RequestRecord",
    "Workload",
    "chunk_plan",
    "load_prompts",
    "run_benchmark",
]
