"""The spans of a test (docs/tracing.md): an OpenTelemetry SDK tracer provider, set once
for the process, exporting each span as it ends to the SDK's InMemorySpanExporter and, for
the spans made in a worker's child processes (forked, so their memory is not the test's),
to a file of JSON lines through the SDK's ConsoleSpanExporter.

``recorder = pytest.fixture(spans.recording)`` in a test module makes the ``recorder``
fixture: tracing on for the test, and ``recorder.spans()`` the spans ended since it began,
as dicts of the SDK's ReadableSpan.to_json().
"""

import atexit
import json
import os
import tempfile

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runs import tracing

_SET: list = []  # (memory exporter, file path) once the provider is set


def _provider() -> tuple[InMemorySpanExporter, str]:
    if not _SET:
        memory = InMemorySpanExporter()
        fd, path = tempfile.mkstemp(prefix="spans-", suffix=".jsonl")
        os.close(fd)
        out = open(path, "a", buffering=1)  # open for the process's life
        atexit.register(out.close)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
            out=out, formatter=lambda span: span.to_json(indent=None) + "\n")))
        trace.set_tracer_provider(provider)
        tracing.look_again()  # an earlier test's on() found none
        _SET.append((memory, path))
    return _SET[0]


class Recorder:
    """The spans ended since ``begin()``, in this process and in its forked children."""

    def __init__(self):
        self.memory, self.path = _provider()
        self.offset = 0

    def begin(self) -> None:
        self.memory.clear()
        self.offset = os.path.getsize(self.path)

    def spans(self, name: str | None = None) -> list[dict]:
        """The spans ended since begin() (each once, in the order they ended), those
        named ``name`` only when given."""
        found = {}
        with open(self.path) as file:
            file.seek(self.offset)
            for line in file:
                span = json.loads(line)
                found[span["context"]["span_id"]] = span
        for span in self.memory.get_finished_spans():
            found.setdefault(f"0x{span.context.span_id:016x}", json.loads(span.to_json()))
        return [s for s in found.values() if name is None or s["name"] == name]


def recording(settings):
    """A pytest fixture's body: tracing on for the test (the TRACING tunable), and the
    Recorder of its spans."""
    settings.SCHEDULER = {**getattr(settings, "SCHEDULER", {}), "TRACING": True}
    recorder = Recorder()
    recorder.begin()
    yield recorder


def trace_id(traceparent: str) -> str:
    """The trace id of W3C ``traceparent`` as the SDK's to_json writes it (0x + hex)."""
    return "0x" + traceparent.split("-")[1]


def span_id(traceparent: str) -> str:
    """The parent span id of W3C ``traceparent``, as to_json writes span ids."""
    return "0x" + traceparent.split("-")[2]
