"""SGLang's contract, in one place: what the optimizer relies on and the simulator reproduces (docs/sglang.md).

- ``flags``: the speculative-decoding flags, SGLang's start-up rules and normalisation, the runtime tree limit;
- ``logs``: the ready line, the fatal lines and the start-up phases of its server log;
- ``endpoints``: the HTTP endpoints;
- ``config_file``: what its ``--config`` YAML parser accepts;
- ``fatal_settings``: fatal log lines that implicate one setting alone.
"""
