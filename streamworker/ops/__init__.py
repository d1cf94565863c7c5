"""Operator tools, usable from Python and behind the CLI and the dashboard: :mod:`.pending` (a
group's pending entries), :mod:`.dead_letters` (list, show, replay, purge) and :mod:`.progress`
(progress lines of long commands). They take sync redis-py clients and print nothing but progress.
"""
