"""Reproductions of other tools' breakdowns, kept apart from this project's own analyses:

- ``hta``: Holistic Trace Analysis 0.5.0's temporal and idle-time breakdowns;
- ``tb_profiler``: torch-tb-profiler 0.4.3's step-time breakdown.

They follow those tools' rules on purpose, including the ones our own analyses do differently
(which rows are device work, how steps are cut, how an idle gap is classified), so that users
find the numbers they know and can compare. Do not "fix" them to our rules: a difference from
the tool is a bug here, a difference from our analyses is not. Each takes the trace alone (no
``AnalysisContext``: the shared selections are our rules, not theirs), which also lets
``analyze`` run them in a second thread. docs/breakdown-definitions.md states their rules.
"""
