"""The TensorBoard plugin: routes that serve the analyzer's JSON report and the exporters'
downloads for a (run, worker, span) chosen by opaque ids, plus the static frontend.

Nothing here computes a number: the report is ``reports.json_report.to_document`` of
``analysis.analyze`` (as ``neuron-prof analyze --json`` prints it), cached per file and
modification time so that each trace is analysed once.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from neuron_profiler.tensorboard import discovery

PLUGIN_NAME = "neuron_profiler"
CACHE_ENTRIES = 16
JSON = "application/json"
STATIC = {  # route -> (file in static/, content type)
    "/index.js": ("index.js", "application/javascript"),
    "/index.html": ("index.html", "text/html"),
    "/app.js": ("app.js", "application/javascript"),
    "/style.css": ("style.css", "text/css"),
}
DOWNLOADS = {"json.gz": "application/gzip", "pftrace": "application/octet-stream"}
_log = logging.getLogger(__name__)

Result = tuple[int, dict[str, Any]]  # (HTTP status, JSON body)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:500]


def _error(status: int, message: str) -> Result:
    return status, {"error": _one_line(message)}


def analyze_span(span: discovery.Span) -> Result:
    """The ``--json`` document of one trace, named by its path relative to the logdir (the
    server's own paths are not shown); a load or analysis failure as an error body."""
    from neuron_profiler.analysis import analyze
    from neuron_profiler.errors import TraceLoadError
    from neuron_profiler.reports.json_report import to_document
    from neuron_profiler.trace import load_trace

    try:
        report = analyze(load_trace(span.path))
    except TraceLoadError as err:
        return _error(422, f"{span.rel}: {err.problem}")
    except Exception as err:  # noqa: BLE001 - one bad trace must not take the others down
        _log.exception("analysis of %s failed", span.path)
        return _error(500, f"{span.rel}: analysis failed: {type(err).__name__}: {err}")
    return 200, to_document([dataclasses.replace(report, source=span.rel)])


class ReportCache:
    """Bounded LRU of results per (file, mtime, size): a trace is analysed once until it
    changes. One analysis at a time (they are memory-heavy); a second request for the same
    trace waits and then hits."""

    def __init__(self, compute: Callable[[discovery.Span], Result],
                 entries: int = CACHE_ENTRIES) -> None:
        self.compute = compute
        self.entries = entries
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[tuple[str, int, int], Result] = OrderedDict()
        self._lock = threading.Lock()
        self._work = threading.Lock()

    def _get(self, key: tuple[str, int, int]) -> Result | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
        return None

    def get(self, span: discovery.Span) -> Result:
        st = span.path.stat()
        key = (str(span.path), st.st_mtime_ns, st.st_size)
        found = self._get(key)
        if found is not None:
            return found
        with self._work:
            found = self._get(key)
            if found is not None:
                return found
            result = self.compute(span)
            with self._lock:
                self.misses += 1
                self._items[key] = result
                while len(self._items) > self.entries:
                    self._items.popitem(last=False)
            return result


def _static_file(name: str) -> bytes | None:
    try:
        return resources.files("neuron_profiler.tensorboard").joinpath("static", name).read_bytes()
    except (FileNotFoundError, OSError):
        return None


def _plotly_js() -> bytes | None:
    """plotly.js from the installed plotly package (never the network)."""
    try:
        return resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return None


def _safe_filename(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:150] or "trace"


class NeuronProfilerPlugin(base_plugin.TBPlugin):
    """The "Neuron Profiler" tab."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self.logdir = Path(context.logdir or ".")
        self.cache = ReportCache(analyze_span)
        self._active = discovery.ActiveCheck(self.logdir)

    def is_active(self) -> bool:
        return self._active()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js",
                                            tab_name="Neuron Profiler")

    def get_plugin_apps(self) -> dict[str, Callable]:
        apps: dict[str, Callable] = {route: self._static(name, ctype)
                                     for route, (name, ctype) in STATIC.items()}
        apps["/plotly.min.js"] = self._serve_plotly
        apps["/runs"] = self._serve_runs
        apps["/report"] = self._serve_report
        apps["/trace"] = self._serve_trace
        return apps

    # --- static files -------------------------------------------------------------------
    def _static(self, name: str, content_type: str) -> Callable:
        @wrappers.Request.application
        def serve(request: wrappers.Request) -> wrappers.Response:
            body = _static_file(name)
            if body is None:
                return _json(request, _error(404, f"{name} is missing from the package"))
            return http_util.Respond(request, body, content_type)

        return serve

    @wrappers.Request.application
    def _serve_plotly(self, request: wrappers.Request) -> wrappers.Response:
        body = _plotly_js()
        if body is None:
            return _json(request, _error(404, "plotly.min.js not found: install plotly"))
        return http_util.Respond(request, body, "application/javascript", expires=3600)

    # --- data ---------------------------------------------------------------------------
    @wrappers.Request.application
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        runs = [{"id": r.id, "name": r.name,
                 "workers": [{"id": w.id, "name": w.name,
                              "spans": [{"id": s.id, "name": s.name} for s in w.spans]}
                             for w in r.workers]}
                for r in discovery.scan(self.logdir)]
        return _json(request, (200, {"runs": runs}))

    def _span(self, request: wrappers.Request) -> discovery.Span | Result:
        ids = [request.args.get(k, "") for k in ("run", "worker", "span")]
        if not all(discovery.ID_PATTERN.match(i) for i in ids):
            return _error(400, "run, worker and span must be ids from /runs")
        span = discovery.find(self.logdir, *ids)
        if span is None:
            return _error(404, "no such trace (moved or deleted? reload the page)")
        return span

    @wrappers.Request.application
    def _serve_report(self, request: wrappers.Request) -> wrappers.Response:
        span = self._span(request)
        if not isinstance(span, discovery.Span):
            return _json(request, span)
        try:
            return _json(request, self.cache.get(span))
        except OSError as err:
            return _json(request, _error(404, f"{span.rel}: {err.strerror or err}"))

    @wrappers.Request.application
    def _serve_trace(self, request: wrappers.Request) -> wrappers.Response:
        fmt = request.args.get("format", "")
        if fmt not in DOWNLOADS:
            return _json(request, _error(400, f"format must be one of {', '.join(DOWNLOADS)}"))
        span = self._span(request)
        if not isinstance(span, discovery.Span):
            return _json(request, span)
        body = _export(span, fmt)
        if isinstance(body, tuple):
            return _json(request, body)
        stem = span.path.name.split(".pt.trace.json")[0]
        name = f"{_safe_filename(stem)}.{'pt.trace.json.gz' if fmt == 'json.gz' else fmt}"
        return http_util.Respond(request, body, DOWNLOADS[fmt], headers=[
            ("Content-Disposition", f'attachment; filename="{name}"')])


def _export(span: discovery.Span, fmt: str) -> bytes | Result:
    """The trace written by ``neuron_profiler.exporters`` in ``fmt``, as bytes."""
    from neuron_profiler.errors import TraceLoadError
    from neuron_profiler.trace import load_trace

    try:
        trace = load_trace(span.path)
        with tempfile.TemporaryDirectory(prefix="neuron-prof-tb-") as tmp:
            out = Path(tmp) / f"trace.{fmt}"
            if fmt == "pftrace":
                from neuron_profiler.exporters.perfetto import write_perfetto_trace

                write_perfetto_trace(trace, out)
            else:
                from neuron_profiler.exporters.chrome import write_chrome_trace

                write_chrome_trace(trace, out)
            return out.read_bytes()
    except TraceLoadError as err:
        return _error(422, f"{span.rel}: {err.problem}")
    except Exception as err:  # noqa: BLE001 - an export failure is this trace's only
        _log.exception("export of %s failed", span.path)
        return _error(500, f"{span.rel}: export failed: {type(err).__name__}: {err}")


def _json(request: wrappers.Request, result: Result) -> wrappers.Response:
    status, body = result
    return http_util.Respond(request, body, JSON, code=status)


class NeuronProfilerLoader(base_plugin.TBLoader):
    """Entry-point target (``tensorboard_plugins``): TensorBoard builds the plugin from it."""

    def load(self, context: base_plugin.TBContext) -> NeuronProfilerPlugin:
        return NeuronProfilerPlugin(context)
