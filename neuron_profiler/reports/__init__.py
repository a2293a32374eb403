"""Report renderers: each turns ``analysis.Report`` objects into one output format and computes
nothing (json_report: the versioned ``--json`` document, schema in report.schema.json;
terminal: the rich terminal report)."""
