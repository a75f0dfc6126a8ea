"""The server's Prometheus metrics: requests by endpoint and status, tokens, drafts, and gauges of
the slots and the queue."""

from __future__ import annotations

import threading

import prometheus_client

from .slots import SlotPool


class Metrics:
    def __init__(self, pool: SlotPool) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        prometheus_client.disable_created_metrics()
        r = self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._totals = {"drafted": 0, "accepted": 0, "generated": 0, "decode_s": 0.0}
        self.requests = Counter("specllama_requests", "HTTP requests answered", ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("specllama_prompt_tokens", "prompt tokens of completions", registry=r)
        self.prompt_processed = Counter("specllama_prompt_tokens_processed",
                                        "prompt tokens processed (not found in a slot's cache)", registry=r)
        self.generated = Counter("specllama_generated_tokens", "tokens generated", registry=r)
        self.drafted = Counter("specllama_drafted_tokens", "tokens drafted", registry=r)
        self.accepted = Counter("specllama_accepted_tokens", "drafted tokens the target kept", registry=r)
        self.decode_seconds = Counter("specllama_decode_seconds", "time spent generating after prefill", registry=r)
        Gauge("specllama_acceptance_rate", "accepted / drafted tokens since start", registry=r).set_function(
            lambda: self._ratio("accepted", "drafted"))
        Gauge("specllama_tokens_per_second", "generated tokens per second of a slot's decoding since start",
              registry=r).set_function(lambda: self._ratio("generated", "decode_s"))
        Gauge("specllama_queue_depth", "requests waiting for a slot", registry=r).set_function(lambda: pool.queued)
        Gauge("specllama_slots_busy", "slots generating", registry=r).set_function(lambda: pool.busy)
        Gauge("specllama_slots_total", "slots", registry=r).set_function(lambda: len(pool.slots))
        Gauge("specllama_slots_per_decode", "slots' decodes merged per llama_decode call since start "
              "(1 with one slot)", registry=r).set_function(lambda: self._per_decode(pool.slots[0]))

    @staticmethod
    def _per_decode(slot) -> float:
        b = None if slot.closed else slot.slot_batching
        return b["chunks"] / b["decodes"] if b and b["decodes"] else 1.0

    def _ratio(self, num: str, den: str) -> float:
        with self._lock:
            return self._totals[num] / self._totals[den] if self._totals[den] else 0.0

    def add(self, stats) -> None:
        decode_s = max(0.0, stats.t_total_ms - stats.t_prefill_ms) / 1000.0
        self.prompt_tokens.inc(stats.n_prompt)
        self.prompt_processed.inc(stats.n_prompt - stats.n_prompt_cached)
        self.generated.inc(stats.n_generated)
        self.drafted.inc(stats.n_drafted)
        self.accepted.inc(stats.n_accepted)
        self.decode_seconds.inc(decode_s)
        with self._lock:
            for key, value in (("drafted", stats.n_drafted), ("accepted", stats.n_accepted),
                               ("generated", stats.n_generated), ("decode_s", decode_s)):
                self._totals[key] += value

    def text(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)
