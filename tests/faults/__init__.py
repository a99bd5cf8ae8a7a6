"""Helpers of the fault-injection suite (tests/test_faults_*.py, tests/test_fuzz_*.py)."""
