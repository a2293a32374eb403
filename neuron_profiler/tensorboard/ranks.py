"""The ``distributed`` route's answer: the cross-rank analysis (``analysis.distributed``) of the
traces of one run that belong with the chosen one, from the per-file rank summaries that the
report cache already holds (no trace is analysed again, only the small summaries meet here).

Which traces belong together is the analyzer's own span grouping (``group_spans``: one file per
rank, overlapping profiling windows), applied to every trace of the run, so that the section
equals ``neuron-prof analyze --json <those files>``'s ``distributed`` section::

    cross_rank_answer(run, selected, files, cache.get_many(spans, SUMMARY))
    # (200, {"sources": [...], "errors": [...], "distributed": {...}}) or (202, progress)
"""

from __future__ import annotations

from typing import Any

from neuron_profiler.tensorboard import discovery

Result = tuple[int, dict[str, Any]]


def cross_rank_answer(
    run: discovery.Run,
    selected: discovery.Span,
    files: list[tuple[discovery.Worker, discovery.Span]],
    results: list[Result],
) -> Result:
    """``results``: each file's summary answer (as ``ReportCache.get_many`` gives them, in the
    order of ``files``). 202 while any is being analysed; the chosen trace's own error when it
    cannot be analysed; else 200 with the failed traces listed under ``errors``."""
    from neuron_profiler.analysis.distributed import distributed, group_spans
    from neuron_profiler.reports.json_report import distributed_document

    pending = [body for status, body in results if status == 202]
    if pending:
        done = len(results) - len(pending)
        return 202, {
            "status": "analysing",
            "phase": f"{done} of {len(results)} traces of the run analysed; {pending[0]['phase']}",
            "elapsed_s": max(b["elapsed_s"] for b in pending),
        }
    summaries, errors = {}, []
    for (worker, span), (status, body) in zip(files, results, strict=True):
        if status != 200:
            if span.id == selected.id:
                return status, body
            errors.append(
                {
                    "worker": worker.name,
                    "span": span.label or span.name,
                    "source": span.rel,
                    "error": body.get("error", str(status)),
                }
            )
        elif body["rank_summary"] is not None:
            summaries[span.rel] = body["rank_summary"]
    mine = summaries.get(selected.rel)
    spans = group_spans([s for s in summaries.values() if s.rank is not None])
    index, together = next(
        ((i, g) for i, g in enumerate(spans) if any(s.source == selected.rel for s in g)),
        (None, [mine] if mine is not None else []),
    )
    return 200, {
        "run": run.name,
        "selected": selected.rel,
        "run_traces": len(files),
        "run_spans": len(spans),
        "span_in_run": index,
        "sources": [s.source for s in together],
        "errors": errors,
        "distributed": distributed_document(distributed(together)),
    }
