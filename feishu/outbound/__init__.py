"""Feishu outbound building blocks: markdown cards and chunks (R2), the streaming card controller (R3) and
the per-chat / per-app send budget (R4). Each is called by the bridge's delivery; none of them stores rows."""
