"""Prometheus metrics (`GET /metrics`), through prometheus-client.

Engine figures are read at scrape time by a custom collector rather than
mirrored into client-side counters on every step: the engine thread keeps its
plain integer counters and never touches a metrics lock. HTTP figures
(requests by route and status) are ordinary prometheus-client counters. Each
app gets its own registry, so several servers in one process (tests) do not
collide. Names carry an `anchorage:` prefix, as llama.cpp's carry `llamacpp:`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

P = "anchorage:"


class EngineCollector:
    def __init__(self, state):
        self.state = state

    def collect(self):
        engine = self.state.engine
        if engine is None:
            return
        c, s = engine.counters, engine.scheduler.counters
        yield _counter("prompt_tokens_total", "Prompt tokens received", c.prompt_tokens)
        yield _counter("tokens_predicted_total", "Tokens generated", c.generation_tokens)
        yield _counter("requests_finished_total", "Requests finished", c.requests_finished)
        yield _counter("engine_steps_total", "Forward steps run", c.steps)
        yield _counter("engine_step_errors_total", "Forward steps and sequence samplings that failed", c.step_errors)
        yield _counter("prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache", s.cache_hit_tokens)
        yield _counter("preemptions_total", "Sequences preempted by recompute", s.preemptions)
        yield _counter("slot_pins_released_total", "Slot pins given up to make room for a request or a restore",
                       engine.scheduler.alloc.holds_released)
        yield _counter("anchors_set_total", "Tool-call anchors set", s.anchors_set)
        yield _counter("anchors_dropped_total", "Anchors dropped after the cursor drifted", s.anchors_dropped)
        yield _counter("anchor_reused_tokens_total",
                       "Prompt tokens of requests whose reuse read window KV that only a previous turn's anchor kept live",
                       s.anchor_reused_tokens)
        yield _counter("window_pages_released_total", "Window-group pages released by slides", s.window_pages_released)
        yield _counter("draft_tokens_total", "Prompt-lookup draft tokens fed after decodes (--ngram-draft-tokens)",
                       s.draft_tokens)
        yield _counter("draft_accepted_tokens_total", "Draft tokens the samples agreed with (kept)", s.draft_accepted)
        yield _gauge("requests_processing", "Sequences running", engine.num_running)
        yield _gauge("requests_deferred", "Sequences waiting", engine.num_waiting)
        pages = GaugeMetricFamily(P + "kv_pages", "KV pool pages by group and state", labels=["group", "state"])
        for u in engine.scheduler.alloc.pool.usage():
            for state, value in (("free", u.free), ("owned", u.owned), ("cached", u.cached), ("total", u.total)):
                pages.add_metric([u.group, state], value)
        yield pages


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    # prometheus-client appends _total itself to counter families.
    return CounterMetricFamily(P + name.removesuffix("_total"), doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(P + name, doc, value=value)


class Metrics:
    def __init__(self, state):
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(state))
        self.http_requests = Counter(
            P.rstrip(":") + ":http_requests", "HTTP requests by route and status",
            ["route", "status"], registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
