"""Tools in a turn (ARCHITECTURE M2): `loop` is the bounded tool loop (no ORM); `turns` runs it for a Turn."""
