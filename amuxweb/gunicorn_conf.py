"""gunicorn's settings for `make run`'s web process (the Procfile) (issue 30, finding 7).

runserver listens with a backlog of 10 and has no timeouts: a burst of 200 webhook POSTs (Feishu pushes every
bot's events at once after an outage) got 119-129 connection resets, each a Feishu retry 15 s or more later, and
half-open sockets were never closed. Here: the kernel's queue takes a burst, threads answer while a request
waits on the database, and slow or idle clients are timed out. Every value can be overridden with gunicorn's own
GUNICORN_CMD_ARGS, e.g. GUNICORN_CMD_ARGS="--workers 4".
"""

import os

bind = f"127.0.0.1:{os.environ.get('PORT_WEB', '8000')}"
# Two cores are the embedded default's machine: two processes, each with threads for requests waiting on I/O.
workers = 2
worker_class = "gthread"
threads = 4
# Connections the kernel queues before gunicorn accepts them (capped by net.core.somaxconn, 4096 on Linux).
backlog = 2048
keepalive = 5  # seconds an idle keep-alive connection stays open
timeout = 30  # a worker silent this long is restarted (a request stuck that long is a bug to see)
graceful_timeout = 20  # SIGTERM (honcho's Ctrl-C): requests in flight get this long to finish
# Request line and headers: gunicorn's own limits, stated so a reader sees that slow-loris headers are bounded.
limit_request_line = 8190
limit_request_fields = 100
accesslog = "-"
errorlog = "-"
loglevel = "info"
