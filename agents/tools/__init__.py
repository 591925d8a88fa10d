"""Tools in a turn (ARCHITECTURE M2, M3): `loop` is the bounded tool loop (no ORM); `turn_tools` runs it for a Turn;
`checks` refuses settings whose tool budget could never fit the Celery task's soft time limit.

Re-runs, and which tools are safe to repeat. A turn is one Celery task (acks_late): a worker killed mid-loop
leaves the task unacknowledged and the broker (or the sweeper) runs the turn again. Every finished call is a
TurnToolCall row written before the next call and the next step starts; the re-run replays those rows to the
model and never runs them again (tests/agents/test_tool_worker_kill.py proves both cases with a real worker).
A call that was *in flight* at the crash was never recorded: the re-run asks the model again, and the model
may call it again, so it can run twice. Read-only tools (search, fetch, list, read, query) are safe to repeat;
a tool with side effects (create an issue, post a message, write or delete a file, run a command, pay) may
happen twice after a crash: allow it only where the server makes it idempotent (a client-chosen id, "create if
absent"), or knowingly accept the risk.
"""
