"""The TensorBoard plugin: routes that serve the analyzer's JSON report and the exporters'
downloads for a (run, worker, span) chosen by opaque ids, the cross-rank analysis of a run's
workers, the diff of two traces, plus the static frontend.

Nothing here computes a number: the report is ``reports.json_report.to_document`` of
``analysis.analyze`` (as ``neuron-prof analyze --json`` prints it) and the timeline is
``reports.timeline_json`` of the same analysis, cached per file and modification time so that
each trace is analysed once, in the background (202 and the phase while it runs). The
``distributed`` route reduces the cached rank summaries of a run's traces (``tensorboard.ranks``).
The ``diff`` route serves ``reports.diff_json.diff_document`` of ``analysis.diff`` of two
traces (as ``neuron-prof diff --json --by BY A B`` prints it; ``by``: op or module), cached
per pair of file versions and grouping.
The ``style`` route serves ``reports.palette.style_document()``: the idle causes' colours (the
HTML report's) and the text limits the page shortens names with (``reports.text``). The
``projection`` route serves ``neuron-prof project --json`` of a trace onto a chip (``chips``
lists them, and the chips a trace can say it ran on: ``--source-chip``'s ``source``), cached
per pair of chips the same way.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from neuron_profiler.exporters.writers import write_trace, writer_for
from neuron_profiler.reports.palette import style_document
from neuron_profiler.tensorboard import discovery, ranks

PLUGIN_NAME = "neuron_profiler"
CACHE_ENTRIES = 16
SUMMARY_ENTRIES = 4096  # rank summaries (kilobytes each) outlive the bundles: a run of many
# traces is reduced across ranks without analysing any of them twice
WAIT_S = 1.0  # a request waits this long for an analysis before answering 202 (progress)
TIMELINE_SEGMENTS = 2000  # per series of the timeline route (analysis.timeline)
JSON = "application/json"
STATIC = {  # route -> (file in static/, content type)
    "/index.js": ("index.js", "application/javascript"),
    "/index.html": ("index.html", "text/html"),
    "/app.js": ("app.js", "application/javascript"),
    "/style.css": ("style.css", "text/css"),
}
# formats served for download -> media type, both from the exporters' one registry
DOWNLOADS = {fmt: writer_for(f"trace.{fmt}").media_type for fmt in ("json.gz", "pftrace")}
_log = logging.getLogger(__name__)

Result = tuple[int, dict[str, Any]]  # (HTTP status, JSON body)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:500]


def _error(status: int, message: str) -> Result:
    return status, {"error": _one_line(message)}


Bundle = dict[str, Result]  # route ("report", "timeline", "summary") -> its answer
Progress = Callable[[str], None]  # told each phase of an analysis ("loading 12.3 MB", ...)
SUMMARY = "summary"  # not served: body {"rank_summary": RankSummary}, for the distributed route
ROUTES = ("report", "timeline", SUMMARY)


def analyze_span(span: discovery.Span, progress: Progress = lambda phase: None) -> Bundle:
    """The ``--json`` document of one trace (named by its path relative to the logdir: the
    server's own paths are not shown), its drawable timeline and its rank summary, from one
    load; a load or analysis failure as the error body of all three."""
    from neuron_profiler.analysis import Options, analyze
    from neuron_profiler.analysis.report import summaries_of
    from neuron_profiler.errors import TraceLoadError
    from neuron_profiler.explorer.inputs import load_host_trace
    from neuron_profiler.reports.json_report import to_document
    from neuron_profiler.reports.timeline_json import timeline_document

    try:
        progress(f"loading {span.path.stat().st_size / 1e6:.1f} MB")
        trace = load_host_trace(span.path)
        progress("analysing")
        report = analyze(trace, Options(timeline_segments=TIMELINE_SEGMENTS))
    except TraceLoadError as err:
        return dict.fromkeys(ROUTES, _error(422, f"{span.rel}: {err.problem}"))
    except Exception as err:  # noqa: BLE001 - one bad trace must not take the others down
        _log.exception("analysis of %s failed", span.path)
        return dict.fromkeys(
            ROUTES, _error(500, f"{span.rel}: analysis failed: {type(err).__name__}: {err}")
        )
    report = dataclasses.replace(report, source=span.rel)
    summary = next(iter(summaries_of([report])), None)
    return {
        "report": (200, to_document([report])),
        "timeline": (200, timeline_document(report)),
        SUMMARY: (200, {"rank_summary": summary}),
    }


PROJECTION = "projection"
# what the Projection view offers where the CLI has --source-chip (app.js: the "source" select)
CHOOSE_SOURCE = "choose the chip it ran on under 'Recorded on'"


def project_span(
    span: discovery.Span, chip: str, progress: Progress = lambda phase: None, source: str = ""
) -> Bundle:
    """``neuron-prof project --chip CHIP [--source-chip SOURCE] --json`` of one trace; a load or
    projection failure (a trace naming no known chip, projected onto another) as the error
    body, asking for the view's 'recorded on' choice where the CLI asks for its flag."""
    from neuron_profiler.analysis.projection import UnknownSourceChip, project
    from neuron_profiler.errors import NeuronProfilerError, TraceLoadError
    from neuron_profiler.explorer.inputs import load_host_trace
    from neuron_profiler.reports.projection_json import projection_document

    try:
        progress(f"loading {span.path.stat().st_size / 1e6:.1f} MB")
        trace = load_host_trace(span.path)
        progress(f"projecting onto {chip}")
        p = project(trace, chip, source=source or None)
    except TraceLoadError as err:
        return {PROJECTION: _error(422, f"{span.rel}: {err.problem}")}
    except UnknownSourceChip as err:
        return {PROJECTION: _error(422, f"{span.rel}: {err.PROBLEM}; {CHOOSE_SOURCE}")}
    except NeuronProfilerError as err:
        return {PROJECTION: _error(422, str(err).replace(str(span.path), span.rel))}
    except Exception as err:  # noqa: BLE001 - one bad trace must not take the others down
        _log.exception("projection of %s failed", span.path)
        return {PROJECTION: _error(500, f"{span.rel}: projection failed: {type(err).__name__}")}
    return {PROJECTION: (200, projection_document(p))}


@dataclasses.dataclass
class _Job:
    """One analysis running (or queued) in the background, and the phase it is in."""

    size: int
    started: float = dataclasses.field(default_factory=time.monotonic)
    phase: str = "queued (another trace is being analysed)"
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    result: Bundle | None = None

    def progress(self) -> dict[str, Any]:
        """The 202 body: what the page shows while it asks again."""
        return {
            "status": "analysing",
            "phase": self.phase,
            "elapsed_s": round(time.monotonic() - self.started, 1),
        }


class ReportCache:
    """Bounded LRU of analyses per (file, mtime, size): a trace is analysed once until it
    changes. Analyses run in a background thread, one at a time (they are memory-heavy); a
    request waits up to ``wait_s`` for its answer, then gets 202 with the analysis' phase so
    that the page can show progress and ask again. A second request for a trace being
    analysed joins that analysis. Rank summaries are kept in a second, longer LRU (they are
    small) so that the cross-rank view of a run larger than ``entries`` analyses each trace
    once."""

    routes = ROUTES  # what one computation answers

    def __init__(
        self,
        compute: Callable[[Any, Progress], Bundle],
        entries: int = CACHE_ENTRIES,
        wait_s: float = WAIT_S,
        summary_entries: int = SUMMARY_ENTRIES,
        routes: tuple[str, ...] = ROUTES,
    ) -> None:
        self.compute = compute
        self.routes = routes
        self.entries = entries
        self.summary_entries = summary_entries
        self.wait_s = wait_s
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[tuple[str, int, int], Bundle] = OrderedDict()
        self._summaries: OrderedDict[tuple[str, int, int], Result] = OrderedDict()
        self._jobs: dict[tuple[str, int, int], _Job] = {}
        self._lock = threading.Lock()
        self._work = threading.Lock()

    def get(self, span: discovery.Span, route: str = "report") -> Result:
        """The route's answer for ``span``, or (202, progress) while it is being computed."""
        answer = self._lookup_or_start(span, route)
        if not isinstance(answer, _Job):
            return answer
        if answer.done.wait(self.wait_s) and answer.result is not None:
            return answer.result[route]
        return 202, answer.progress()

    def get_many(self, spans: list[discovery.Span], route: str) -> list[Result]:
        """Each span's answer, all analyses started at once and waited for ``wait_s`` in
        all; (202, progress) for those still running, (404, error) for a vanished file."""
        answers: list[Result | _Job] = []
        for span in spans:
            try:
                answers.append(self._lookup_or_start(span, route))
            except OSError as err:
                answers.append(_error(404, f"{span.rel}: {err.strerror or err}"))
        deadline = time.monotonic() + self.wait_s
        out: list[Result] = []
        for a in answers:
            if isinstance(a, _Job):
                if a.done.wait(max(0.0, deadline - time.monotonic())) and a.result is not None:
                    a = a.result[route]
                else:
                    a = (202, a.progress())
            out.append(a)
        return out

    @staticmethod
    def _key(span: discovery.Span) -> tuple:
        """What an answer is cached by: the file and its version; OSError: no file."""
        st = span.path.stat()
        return (str(span.path), st.st_mtime_ns, st.st_size)

    @staticmethod
    def _label(span: discovery.Span) -> str:
        return span.rel

    def _lookup_or_start(self, span: Any, route: str) -> Result | _Job:
        """The cached answer, else the (new or running) analysis job; OSError: no file."""
        key = self._key(span)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key][route]
            if route == SUMMARY and key in self._summaries:
                self._summaries.move_to_end(key)
                self.hits += 1
                return self._summaries[key]
            job = self._jobs.get(key)
            if job is None:
                job = self._jobs[key] = _Job(size=key[-1])
                threading.Thread(
                    target=self._run,
                    args=(key, span, job),
                    daemon=True,
                    name=f"neuron-prof-tb {self._label(span)}",
                ).start()
            return job

    def _run(self, key: tuple, span: Any, job: _Job) -> None:
        def progress(phase: str) -> None:
            job.phase = phase

        try:
            with self._work:  # (one at a time: until here, the job is queued)
                progress("starting (loading the analysis)")
                result = self.compute(span, progress)
        except BaseException as err:  # noqa: BLE001 - the waiting page must get an answer
            label = self._label(span)
            _log.exception("analysis of %s failed", label)
            result = dict.fromkeys(self.routes, _error(500, f"{label}: {type(err).__name__}"))
        with self._lock:
            self.misses += 1
            self._items[key] = result
            while len(self._items) > self.entries:
                self._items.popitem(last=False)
            if SUMMARY in result:
                self._summaries[key] = result[SUMMARY]
            while len(self._summaries) > self.summary_entries:
                self._summaries.popitem(last=False)
            self._jobs.pop(key, None)
        job.result = result
        job.done.set()


DIFF = "diff"


DiffAsk = tuple[discovery.Span, discovery.Span, str]  # A, B, group_by ("op" or "module")


def diff_spans(pair: DiffAsk, progress: Progress) -> Bundle:
    """``neuron-prof diff --json --by G A B`` of two traces (A the baseline), each named by its
    path relative to the logdir; a load or diff failure as the error body."""
    from neuron_profiler.analysis.diff import diff
    from neuron_profiler.errors import TraceLoadError
    from neuron_profiler.explorer.inputs import load_host_trace
    from neuron_profiler.reports.diff_json import diff_document

    a, b, group_by = pair
    try:
        traces = []
        for span in (a, b):
            progress(f"loading {span.rel} ({span.path.stat().st_size / 1e6:.1f} MB)")
            traces.append(load_host_trace(span.path))
        progress("aligning and attributing")
        d = diff(*traces, group_by=group_by)
    except TraceLoadError as err:
        rel = a.rel if Path(err.path) == a.path else b.rel
        return {DIFF: _error(422, f"{rel}: {err.problem}")}
    except Exception as err:  # noqa: BLE001 - one bad pair must not take the others down
        _log.exception("diff of %s and %s failed", a.path, b.path)
        return {DIFF: _error(500, f"diff of {a.rel} and {b.rel} failed: {type(err).__name__}")}
    d = dataclasses.replace(
        d, a=dataclasses.replace(d.a, source=a.rel), b=dataclasses.replace(d.b, source=b.rel)
    )
    return {DIFF: (200, diff_document([d]))}


class DiffCache(ReportCache):
    """Diffs of (A span, B span, grouping), cached by both files' versions and the grouping,
    computed one at a time."""

    routes = (DIFF,)

    @staticmethod
    def _key(pair: DiffAsk) -> tuple:
        return (*ReportCache._key(pair[0]), *ReportCache._key(pair[1]), pair[2])

    @staticmethod
    def _label(pair: DiffAsk) -> str:
        return f"{pair[0].rel} vs {pair[1].rel} by {pair[2]}"


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
        # (target chip, source chip or "" for the trace's own) -> its projections
        self.projections: dict[tuple[str, str], ReportCache] = {}
        self._projections_lock = threading.Lock()
        self.diffs = DiffCache(diff_spans)
        self._active = discovery.ActiveCheck(self.logdir)

    def is_active(self) -> bool:
        return self._active()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Neuron Profiler")

    def get_plugin_apps(self) -> dict[str, Callable]:
        apps: dict[str, Callable] = {
            route: self._static(name, ctype) for route, (name, ctype) in STATIC.items()
        }
        apps["/plotly.min.js"] = self._serve_plotly
        apps["/runs"] = self._serve_runs
        apps["/style"] = self._serve_style
        apps["/report"] = self._serve_report
        apps["/timeline"] = self._serve_timeline
        apps["/trace"] = self._serve_trace
        apps["/distributed"] = self._serve_distributed
        apps["/chips"] = self._serve_chips
        apps["/projection"] = self._serve_projection
        apps["/diff"] = self._serve_diff
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

    @wrappers.Request.application
    def _serve_style(self, request: wrappers.Request) -> wrappers.Response:
        """The palette and text limits the page draws with (the HTML report's)."""
        return _json(request, (200, style_document()))

    # --- data ---------------------------------------------------------------------------
    @wrappers.Request.application
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        runs = [
            {
                "id": r.id,
                "name": r.name,
                "workers": [
                    {
                        "id": w.id,
                        "name": w.name,
                        "spans": [{"id": s.id, "name": s.name, "label": s.label} for s in w.spans],
                    }
                    for w in r.workers
                ],
            }
            for r in discovery.scan(self.logdir)
        ]
        return _json(request, (200, {"runs": runs}))

    def _span(self, request: wrappers.Request, prefix: str = "") -> discovery.Span | Result:
        ids = [request.args.get(prefix + k, "") for k in ("run", "worker", "span")]
        if not all(discovery.ID_PATTERN.match(i) for i in ids):
            return _error(
                400, f"{prefix}run, {prefix}worker and {prefix}span must be ids from /runs"
            )
        span = discovery.find(self.logdir, *ids)
        if span is None:
            return _error(404, "no such trace (moved or deleted? reload the page)")
        return span

    def _analysis(self, request: wrappers.Request, route: str) -> wrappers.Response:
        span = self._span(request)
        if not isinstance(span, discovery.Span):
            return _json(request, span)
        try:
            return _json(request, self.cache.get(span, route))
        except OSError as err:
            return _json(request, _error(404, f"{span.rel}: {err.strerror or err}"))

    @wrappers.Request.application
    def _serve_report(self, request: wrappers.Request) -> wrappers.Response:
        return self._analysis(request, "report")

    @wrappers.Request.application
    def _serve_timeline(self, request: wrappers.Request) -> wrappers.Response:
        return self._analysis(request, "timeline")

    @wrappers.Request.application
    def _serve_chips(self, request: wrappers.Request) -> wrappers.Response:
        """The chips a trace can be projected onto ("same": its own), as ``neuron-prof project
        --chip`` takes them, and those it can name as the one it ran on (``--source-chip``)."""
        from neuron_profiler.analysis.projection import TARGETS
        from neuron_profiler.costmodel.chips import CHIPS

        return _json(request, (200, {"chips": list(TARGETS), "sources": list(CHIPS)}))

    @wrappers.Request.application
    def _serve_projection(self, request: wrappers.Request) -> wrappers.Response:
        from neuron_profiler.analysis.projection import TARGETS
        from neuron_profiler.costmodel.chips import CHIPS

        chip = request.args.get("chip", "")
        if chip not in TARGETS:
            return _json(request, _error(400, f"chip must be one of {', '.join(TARGETS)}"))
        source = request.args.get("source", "")
        if source and source not in CHIPS:
            return _json(request, _error(400, f"source must be one of {', '.join(CHIPS)}"))
        span = self._span(request)
        if not isinstance(span, discovery.Span):
            return _json(request, span)
        with self._projections_lock:
            cache = self.projections.get((chip, source))
            if cache is None:
                cache = self.projections[chip, source] = ReportCache(
                    lambda s, progress: project_span(s, chip, progress, source),
                    wait_s=self.cache.wait_s,
                    routes=(PROJECTION,),
                )
        try:
            return _json(request, cache.get(span, PROJECTION))
        except OSError as err:
            return _json(request, _error(404, f"{span.rel}: {err.strerror or err}"))

    @wrappers.Request.application
    def _serve_distributed(self, request: wrappers.Request) -> wrappers.Response:
        """The cross-rank analysis of the run's traces that the analyzer's span grouping puts
        with the chosen one (``run`` and ``span`` ids: any worker's span of the run)."""
        ids = [request.args.get(k, "") for k in ("run", "span")]
        if not all(discovery.ID_PATTERN.match(i) for i in ids):
            return _json(request, _error(400, "run and span must be ids from /runs"))
        run = next((r for r in discovery.scan(self.logdir) if r.id == ids[0]), None)
        files = [(w, s) for w in run.workers for s in w.spans] if run is not None else []
        selected = next((s for _, s in files if s.id == ids[1]), None)
        if run is None or selected is None:
            return _json(
                request, _error(404, "no such run or trace (moved or deleted? reload the page)")
            )
        results = self.cache.get_many([s for _, s in files], SUMMARY)
        return _json(request, ranks.cross_rank_answer(run, selected, files, results))

    @wrappers.Request.application
    def _serve_diff(self, request: wrappers.Request) -> wrappers.Response:
        """``neuron-prof diff --json --by BY`` of the trace ``a_run`` / ``a_worker`` /
        ``a_span`` (A, the baseline) and ``run`` / ``worker`` / ``span`` (B); ``by``: "op"
        (default) or "module"."""
        from neuron_profiler.analysis.diff import BY_OP, GROUPINGS

        group_by = request.args.get("by", BY_OP)
        if group_by not in GROUPINGS:
            return _json(request, _error(400, f"by must be one of {', '.join(GROUPINGS)}"))
        a, b = self._span(request, "a_"), self._span(request)
        for span in (a, b):
            if not isinstance(span, discovery.Span):
                return _json(request, span)
        try:
            return _json(request, self.diffs.get((a, b, group_by), DIFF))
        except OSError as err:
            return _json(request, _error(404, f"{err.filename or ''}: {err.strerror or err}"))

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
        stem = discovery.trace_stem(span.path.name) or span.path.name
        name = f"{_safe_filename(stem)}.{'pt.trace.json.gz' if fmt == 'json.gz' else fmt}"
        return http_util.Respond(
            request,
            body,
            DOWNLOADS[fmt],
            headers=[("Content-Disposition", f'attachment; filename="{name}"')],
        )


def _export(span: discovery.Span, fmt: str) -> bytes | Result:
    """The trace written by ``exporters.writers.write_trace`` in ``fmt``, as bytes."""
    from neuron_profiler.errors import TraceLoadError
    from neuron_profiler.explorer.inputs import load_host_trace

    try:
        trace = load_host_trace(span.path)
        with tempfile.TemporaryDirectory(prefix="neuron-prof-tb-") as tmp:
            out = Path(tmp) / f"trace.{fmt}"
            write_trace(trace, out)
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
