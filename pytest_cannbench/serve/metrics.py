"""The service's Prometheus metrics (``GET /metrics``), in a registry of its own (never the process-global one).

Names, all prefixed ``cannbench_serve_``: ``queue_depth`` and ``in_flight`` (gauges, read when scraped),
``requests_total{endpoint,code}``, ``request_seconds{endpoint}`` (histogram: the HTTP wall),
``job_queue_seconds`` and ``job_grade_seconds`` (histograms: a candidate's wait for a judge and its grading),
``judge_busy_seconds_total{judge}``, ``judge_restarts_total{judge}``, ``answers_total{status}`` (a candidate's
status), ``cases_total{status,code}`` (every case's status and failure code; ``none`` when it passed),
``retries_total``, ``rejected_total{reason}`` (queue_full, bad_request, unauthorized, too_large, draining).
No label ever holds request data (a file name, a submission's text) or the secret: labels are the service's own
vocabularies.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "cannbench_serve_"
        self.queue_depth = Gauge(f"{p}queue_depth", "candidates waiting for a judge", registry=r)
        self.in_flight = Gauge(f"{p}in_flight", "candidates being graded", registry=r)
        self.requests = Counter(f"{p}requests_total", "HTTP requests answered", ["endpoint", "code"], registry=r)
        self.request_seconds = Histogram(
            f"{p}request_seconds", "HTTP request wall", ["endpoint"], buckets=_LATENCY, registry=r
        )
        self.job_queue = Histogram(
            f"{p}job_queue_seconds", "a candidate's wait for a judge", buckets=_LATENCY, registry=r
        )
        self.job_grade = Histogram(
            f"{p}job_grade_seconds", "a candidate's grading on its judge", buckets=_LATENCY, registry=r
        )
        self.judge_busy = Counter(
            f"{p}judge_busy_seconds_total", "seconds a judge spent on calls", ["judge"], registry=r
        )
        self.judge_restarts = Counter(f"{p}judge_restarts_total", "judges lost and waited back", ["judge"], registry=r)
        self.answers = Counter(f"{p}answers_total", "candidates answered, by status", ["status"], registry=r)
        self.cases = Counter(
            f"{p}cases_total", "cases answered, by status and failure code", ["status", "code"], registry=r
        )
        self.retries = Counter(f"{p}retries_total", "candidates retried after their judge was lost", registry=r)
        self.rejected = Counter(f"{p}rejected_total", "requests refused before queueing", ["reason"], registry=r)

    def bind(self, depth: Callable[[], float], in_flight: Callable[[], float]) -> None:
        self.queue_depth.set_function(depth)
        self.in_flight.set_function(in_flight)

    def text(self) -> bytes:
        return generate_latest(self.registry)
