"""Finds the fastest SGLang speculative-decoding launch configuration."""

__version__ = "0.1.0"
