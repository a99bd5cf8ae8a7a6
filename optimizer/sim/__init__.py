"""An SGLang-compatible simulator: a fake ``sglang.launch_server`` for tests, demos and optimizer benchmarks.

- ``python -m optimizer.sim [SGLang flags] [--sim-profile P --sim-time-scale X --sim-step-scale X --sim-seed N]``
  boots in SGLang's phases and serves SGLang 0.5.17's HTTP API (``server.py``, ``engine.py``);
- ``python -m optimizer.sim truth --profile P --space FILE`` writes the ground truth of a search space
  (``truth.py``);
- ``optimizer.sim.model``: the pure performance model (``load_profile(name).evaluate(flags, env, concurrency)``),
  calibrated per profile (``profiles.py``) to published figures.
"""
