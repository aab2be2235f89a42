"""The overload scenario: a deep backlog plus a bulk burst while workers drain; memory must
stay bounded and the API must keep answering (docs/reliability.md, "overload")."""

import threading
import time
import urllib.error
import urllib.request

from chaos.cluster import free_port
from chaos.load import create_one_off
from chaos.session import Scenario, Session, Size
from scheduler_core.rest.tokens import create_token

REQUEST_TIMEOUT_S = 10.0
# How much a daemon's resident memory (with its children, KiB) may grow from its peak in
# the first third of the window (the backlog already being drained) to its peak over the
# burst and the drain, before memory counts as unbounded: the burst and the backlog must
# stream through the daemons, not pile up in them.
RSS_GROWTH_ALLOWED_KIB = 64 * 1024


class ApiProbe(threading.Thread):
    """Polls GET /healthz and an authenticated GET /api/jobs/?page_size=1 every
    ``interval_s`` seconds, recording each latency (s) and every failure."""

    def __init__(self, base_url: str, token: str, interval_s: float = 0.5):
        super().__init__(daemon=True)
        self.base_url, self.token, self.interval_s = base_url, token, interval_s
        self.latencies: dict[str, list[float]] = {"/healthz": [], "/api/jobs/?page_size=1": []}
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval_s):
            for path in self.latencies:
                request = urllib.request.Request(self.base_url + path)
                if path.startswith("/api/"):
                    request.add_header("Authorization", f"Token {self.token}")
                began = time.monotonic()
                try:
                    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as reply:
                        reply.read()
                    self.latencies[path].append(time.monotonic() - began)
                except (urllib.error.URLError, OSError) as exc:
                    self.errors.append(f"{path}: {exc}")

    def wait_up(self, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base_url + "/healthz", timeout=2):
                    return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        return False

    def summary(self) -> dict[str, str]:
        out = {}
        for path, values in self.latencies.items():
            if values:
                ordered = sorted(values)
                p50 = ordered[len(ordered) // 2]
                p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
                out[path] = (f"{len(values)} ok, p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} "
                             f"ms, max {ordered[-1] * 1000:.0f} ms")
            else:
                out[path] = "no answer"
        return out


class Overload(Scenario):
    """A backlog of pending runs due at once, then a burst of jobs through the bulk path
    (jobs.services.create_jobs) while the workers drain it; daemons' RSS is sampled from
    /proc and a gunicorn web server is polled throughout."""

    name = "overload"
    short = Size(one_off=2500, cron=20, duration_s=15, concurrency=3, drain_s=180)
    long = Size(one_off=50_000, cron=100, duration_s=60, workers=3, concurrency=3,
                drain_s=900)
    BURST_SHARE = 5  # the burst is one_off / 5 jobs: 10,000 in the long version

    def payload(self, rng) -> dict:
        return {"seconds": 0}

    def start_daemons(self, s: Session) -> None:
        super().start_daemons(s)
        port = free_port()
        s.cluster.add("web", ["-m", "gunicorn", "scheduler_project.wsgi", "--bind",
                              f"127.0.0.1:{port}", "--workers", "2", "--timeout", "60"])
        s.extra["probe"] = ApiProbe(f"http://127.0.0.1:{port}", create_token(s.user))
        s.extra["rss"] = {}

    def sample(self, s: Session) -> None:
        for name, kib in s.cluster.rss_kib().items():
            s.extra["rss"].setdefault(name, []).append(kib)

    def create_load(self, s: Session) -> None:
        probe: ApiProbe = s.extra["probe"]
        if not probe.wait_up():
            s.result.failures.append("the web server never answered /healthz")
        probe.start()
        backlog = create_one_off(s.rng, s.size.one_off, 0, start_in_s=0,
                                 payload_fn=self.payload, name="chaos backlog")
        s.say(f"backlog: {len(backlog)} runs due now")

    def inject(self, s: Session) -> None:
        s.on_tick = lambda: self.sample(s)
        s.tick(s.size.duration_s / 3)
        s.extra["baseline"] = {name: max(v) for name, v in s.extra["rss"].items()}
        burst = s.size.one_off // self.BURST_SHARE
        s.fault("bulk burst", f"{burst} jobs")
        began = time.monotonic()
        create_one_off(s.rng, burst, 0, payload_fn=self.payload, name="chaos burst")
        s.extra["burst_s"] = time.monotonic() - began
        s.until_deadline()

    def verify(self, s: Session) -> None:
        probe: ApiProbe = s.extra["probe"]
        probe.halt.set()
        probe.join(REQUEST_TIMEOUT_S + 1)
        s.result.notes.append(f"burst of {s.size.one_off // self.BURST_SHARE} jobs created in "
                              f"{s.extra.get('burst_s', 0):.1f} s through create_jobs")
        for path, text in probe.summary().items():
            s.result.notes.append(f"API {path}: {text}")
        if probe.errors:
            s.result.failures.append(f"{len(probe.errors)} API requests failed, e.g. "
                                     f"{probe.errors[0]}")
        for path, values in probe.latencies.items():
            if not values:
                s.result.failures.append(f"API {path} never answered")
        baseline = s.extra.get("baseline", {})
        for name, samples in sorted(s.extra["rss"].items()):
            first, peak = baseline.get(name, samples[0]), max(samples)
            s.result.notes.append(f"RSS {name} (with its children): {first // 1024} MiB "
                                  f"before the burst, peak {peak // 1024} MiB, last "
                                  f"{samples[-1] // 1024} MiB ({len(samples)} samples)")
            if peak - first > RSS_GROWTH_ALLOWED_KIB:
                s.result.failures.append(f"{name}'s memory grew from {first // 1024} MiB to "
                                         f"{peak // 1024} MiB under load")


