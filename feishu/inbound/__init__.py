"""Feishu to the hub: the webhook and the long connection (verified by lark-oapi), the intake's outbox, parsing,
and routing of one stored event to the thread context, a turn or a discuss wake (F1, F2, G6)."""
