"""Discuss groups: a burst of un-addressed messages becomes one debounced wake, judged by the probe (P1, P9, P10).
The wake's Celery tasks are in `feishu.tasks`."""
