"""Proof benchmarks (issue 10): streamworker side by side with raw loops and peer frameworks.

Run: ``python -m benchmarks.proof_bench`` (``--quick`` for a few minutes). Every consumer runs in
its own subprocess, started and SIGKILLed by the harness:

* :mod:`benchmarks.proof.handlers`: the handler body every framework calls (no-op, one row into
  PostgreSQL, a durable per-message counter in Redis, or a latency sample);
* :mod:`benchmarks.proof.swapp`: the streamworker App run by ``streamworker run``;
* :mod:`benchmarks.proof.consumers`: the raw loops and the peers (``python -m
  benchmarks.proof.consumers KIND``);
* :mod:`benchmarks.proof.variants`: how each variant is pre-filled, started and watched;
* :mod:`benchmarks.proof.scenarios`: throughput, crash and latency runs;
* :mod:`benchmarks.proof.report`: targets, the Markdown report, the JSON schema and the chart.
"""
