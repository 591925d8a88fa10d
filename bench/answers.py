"""Which reply answered each message of a bench phase: its own, or, for a message collected into another turn
(queue mode `collect`, issue 22), the reply of the turn that collected it."""


def answered_at(turns: list[tuple[int, str, str, list | None]], replies: dict[str, float]) -> dict[str, float]:
    """{message id: when the reply that answered it reached the stub}. `turns` are (id, source message id, status,
    the ids of the turns it collected); a collected turn is skipped and answered by the turn that collected it."""
    source_of = {turn_id: source for turn_id, source, _, _ in turns}
    answered: dict[str, float] = {}
    for _, source, status, collected in turns:
        if status == "skipped":
            continue
        group = [source] + [source_of[turn_id] for turn_id in collected or [] if turn_id in source_of]
        at = next((replies[message] for message in reversed(group) if message in replies), None)
        if at is not None:
            for message in group:
                answered[message] = at
    return answered


def phase_turns(db, *, prefix: str) -> list[tuple[int, str, str, list[int]]]:
    """(id, source message id, status, collected turn ids) of every turn whose message id starts with `prefix`,
    read over the bench's own psycopg connection."""
    rows = db.execute(
        "SELECT id, source_message_id, status, channel_state -> 'collected' FROM agents_turn"
        " WHERE source_message_id LIKE %s",
        (f"{prefix}%",),
    ).fetchall()
    return [(turn_id, source, status, [int(c) for c in collected or []]) for turn_id, source, status, collected in rows]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else float("nan")
