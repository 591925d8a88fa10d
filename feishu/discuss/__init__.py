"""Discuss groups: a burst of un-addressed messages becomes one debounced wake, judged by the probe (P1, P9, P10).

`wake` opens, extends, absorbs and ends wakes (the debounce); `fire` claims a due wake, runs the judge and starts
its turn; `sweep` hands every wake past due to a worker. The wake's Celery tasks are in `feishu.tasks`."""
