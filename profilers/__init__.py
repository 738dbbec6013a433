"""Profilers: honest latency (cold start, interleaved warm percentiles and ratios), per-op
time mapped to ONNX nodes, memory and leak checks, sweeps, NVTX ranges and the nsys
round trip. :func:`profilers.profile.run_profile` ties them together; ``studio.api.profile``
is the entry point for the CLI and the UI. Engine work runs in sandbox workers
(:mod:`profilers.runners` inside the jobs of :mod:`profilers.latency`, :mod:`profilers.ops`,
:mod:`profilers.memory`, :mod:`profilers.sweeps`)."""
