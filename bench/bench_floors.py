"""The floor of the stack (issue 11): the least CPU each piece of one @-mention's path costs on this machine.

Issue 11 asks for 100 group messages/s on 2 cores, "about 20 ms of CPU per message in all". This bench measures
what the chosen stack costs per unit with none of our code in between, so the goal can be weighed against a sum
of floors instead of a guess. Each piece runs N times in one run, on 127.0.0.1 only:
- a Django request: the WSGI handler answering `/feishu/ping/` (no gunicorn, no socket: a lower bound);
- an ORM statement on PostgreSQL: a primary-key SELECT and a one-row UPDATE, Python's CPU and the backend's
  (and, for comparison, the same two statements through a cursor: what the ORM's query building costs);
- a Celery task: `apply_async` of a no-op task (the publisher's CPU), and the worker's CPU to receive, run and
  acknowledge it (a real `celery worker --pool threads` on the Redis broker, its /proc CPU over the batch minus
  its idle rate);
- an LLM call: the `openai` SDK (one cached client) against the OpenAI-compatible stub;
- a Feishu reply: the `lark-oapi` SDK (one cached client, tenant token cached) against the Feishu stub.
The stubs run in a child process, so their CPU is not counted. Then the path of one @-mention as the pipeline
bench counts it (1 webhook request, 2 tasks, the statements per message of `python -m bench pipeline`, 1 model
call, 1 reply): the sum of the floors, and the messages/s two cores could carry if nothing else ran.
Run: `DATABASE_URL=postgres://... REDIS_URL=redis://127.0.0.1:6379/N python -m bench floors` (needs both).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from celery import shared_task

from bench.bench_pipeline import _cpu_seconds, _database, _stop, _wait_for

ROOT = Path(__file__).resolve().parents[1]
CALLS = 300
STATEMENTS = 2000
TASKS = 1500
FLOOR_QUEUE = "bench_floors"
DONE_KEY = "bench_floors:done"
# The @-mention path as `python -m bench pipeline` counted it on 2026-12-04 (inbound_event_process:turn 8.0 and
# turn_run_task:delivered 13.1 statements per task).
STATEMENTS_PER_MESSAGE = 21
CORES = 2


@shared_task(name="bench.floors.noop", ignore_result=True)
def noop_task(index: int) -> int:
    """Counts itself done in Redis (one INCR: the least a task can do that the bench can see)."""
    _done_counter().incr(DONE_KEY)
    return index


_counter = threading.local()


def _done_counter():
    if not hasattr(_counter, "client"):
        import redis

        _counter.client = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _counter.client


def _serve_stubs(directory: str) -> None:
    """Child: the Feishu stub and the LLM stub until SIGTERM."""
    from tests.stubs.feishu_server import FeishuStubServer
    from tests.stubs.llm_servers import LLMStubServer, StubResponse, openai_chat_body

    feishu = FeishuStubServer().start()
    feishu.stub.rate_limits_enabled = False  # a floor: no send budget in the way
    llm = LLMStubServer().start()
    llm.respond_with("openai_chat", lambda request: StubResponse(body=openai_chat_body(text="noted")))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    Path(directory, "ports.json").write_text(json.dumps({"feishu": feishu.url, "llm": llm.url("/v1")}))
    stopping.wait()


def _per_call_ms(call, count: int) -> float:
    call()  # warm: connections, tokens, lazy imports
    started = time.process_time()
    for _ in range(count):
        call()
    return (time.process_time() - started) / count * 1000


def _django_request_ms() -> float:
    from django.core.handlers.wsgi import WSGIHandler
    from django.test.client import RequestFactory

    handler = WSGIHandler()
    environ = RequestFactory().get("/feishu/ping/", HTTP_HOST="127.0.0.1").environ

    def request() -> None:
        body = b"".join(handler(dict(environ), lambda status, headers, exc_info=None: None))
        assert body is not None

    return _per_call_ms(request, CALLS * 3)


def _orm_statement_ms() -> tuple[float, float, float]:
    """(Python's CPU, the PostgreSQL backend's CPU, Python's CPU through the driver without the ORM) per statement:
    half SELECT by pk, half one-row UPDATE."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    user_model = get_user_model()
    user = user_model.objects.create(username="bench-floors")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]

    def statements() -> None:
        user_model.objects.filter(pk=user.pk).first()
        user_model.objects.filter(pk=user.pk).update(first_name="x")

    def driver_statements() -> None:  # the same two statements through psycopg alone, for comparison
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, username FROM auth_user WHERE id = %s LIMIT 1", [user.pk])
            cursor.fetchall()
            cursor.execute("UPDATE auth_user SET first_name = %s WHERE id = %s", ["x", user.pk])

    backend_before = _cpu_seconds(backend)
    python_ms = _per_call_ms(statements, STATEMENTS // 2) / 2
    backend_ms = (_cpu_seconds(backend) - backend_before) / STATEMENTS * 1000
    driver_ms = _per_call_ms(driver_statements, STATEMENTS // 2) / 2
    return python_ms, backend_ms, driver_ms


def _celery_task_ms(env: dict[str, str], log_dir: Path) -> tuple[float, float]:
    """(publish CPU in this process, worker CPU per task) for the no-op task on the Redis broker."""
    import redis

    counter = redis.Redis.from_url(os.environ["REDIS_URL"])
    counter.delete(DONE_KEY, FLOOR_QUEUE)
    celery = str(Path(sys.executable).with_name("celery"))
    argv = [celery, "-A", "amuxweb", "worker", "--pool", "threads", "--concurrency", "4", "-Q", FLOOR_QUEUE]
    argv += ["--include", "bench.bench_floors", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    argv += ["--loglevel", "WARNING"]
    log = (log_dir / "worker.log").open("ab")
    worker = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        noop_task.apply_async(args=[0], queue=FLOOR_QUEUE)
        _wait_for(lambda: int(counter.get(DONE_KEY) or 0) >= 1, "the floor worker", seconds=120)
        time.sleep(2)
        idle_started, idle_cpu = time.monotonic(), _cpu_seconds(worker.pid)
        time.sleep(3)
        idle_rate = (_cpu_seconds(worker.pid) - idle_cpu) / (time.monotonic() - idle_started)

        counter.set(DONE_KEY, 0)
        started, cpu_before = time.monotonic(), _cpu_seconds(worker.pid)
        publish_ms = _per_call_ms(lambda: noop_task.apply_async(args=[1], queue=FLOOR_QUEUE), TASKS)
        _wait_for(lambda: int(counter.get(DONE_KEY) or 0) >= TASKS + 1, "the floor tasks", seconds=300)
        elapsed = time.monotonic() - started
        worker_ms = (_cpu_seconds(worker.pid) - cpu_before - idle_rate * elapsed) / (TASKS + 1) * 1000
        return publish_ms, worker_ms
    finally:
        _stop(worker)
        counter.delete(DONE_KEY, FLOOR_QUEUE)


def _llm_call_ms(base_url: str) -> float:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    messages = [{"role": "system", "content": "You are a bench."}, {"role": "user", "content": "question"}]
    return _per_call_ms(lambda: client.chat.completions.create(model="gpt-bench", messages=messages), CALLS)


def _feishu_reply_ms(domain: str) -> float:
    import lark_oapi as lark
    from lark_oapi.api.im.v1 import ReplyMessageRequest, ReplyMessageRequestBody

    client = lark.Client.builder().app_id("cli_floors").app_secret("s").domain(domain)
    client = client.log_level(lark.LogLevel.WARNING).build()
    body = ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": "noted"})).build()

    def reply() -> None:
        request = ReplyMessageRequest.builder().message_id("om_floors").request_body(body).build()
        response = client.im.v1.message.reply(request)
        assert response.success(), response.msg

    return _per_call_ms(reply, CALLS)


def run() -> None:
    database_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not database_url.startswith(("postgres://", "postgresql://")) or not redis_url:
        print("needs DATABASE_URL (PostgreSQL) and REDIS_URL; skipped")
        return
    bench_database, _ = _database(suffix="bench_floors")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "amuxweb.settings.base",
        "DATABASE_URL": bench_database,
        "SECRET_KEY": "bench-floors-secret-key-that-is-long-enough-0123456789",
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "false",
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    print(f"load average before: {' '.join(f'{v:.1f}' for v in os.getloadavg())} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as directory:
        stubs = subprocess.Popen([sys.executable, "-m", "bench.bench_floors", "--stubs", directory], cwd=ROOT, env=env)
        try:
            _wait_for(lambda: Path(directory, "ports.json").exists(), "the stubs", seconds=60)
            ports = json.loads(Path(directory, "ports.json").read_text())
            request_ms = _django_request_ms()
            statement_ms, backend_ms, driver_ms = _orm_statement_ms()
            publish_ms, worker_ms = _celery_task_ms(env, Path(directory))
            llm_ms = _llm_call_ms(ports["llm"])
            reply_ms = _feishu_reply_ms(ports["feishu"])
        finally:
            stubs.terminate()
            stubs.wait(timeout=20)
    rows = [
        ("Django request (WSGI handler, trivial view)", request_ms, 1),
        ("ORM statement, Python side", statement_ms, STATEMENTS_PER_MESSAGE),
        ("ORM statement, PostgreSQL backend", backend_ms, STATEMENTS_PER_MESSAGE),
        ("Celery publish (apply_async)", publish_ms, 2),
        ("Celery task in a threads worker (receive, run, ack)", worker_ms, 2),
        ("openai SDK chat completion (client side)", llm_ms, 1),
        ("lark-oapi message reply (client side)", reply_ms, 1),
    ]
    if os.environ.get("AMUX_BENCH_FLOORS_OUT"):  # `python -m bench pipeline --floors` weighs its run against these
        pieces = {"request": request_ms, "statement": statement_ms + backend_ms, "publish": publish_ms}
        pieces |= {"task": worker_ms, "llm": llm_ms, "reply": reply_ms}
        Path(os.environ["AMUX_BENCH_FLOORS_OUT"]).write_text(json.dumps(pieces))
    print(f"{'piece':52} {'ms CPU':>7} {'per @-mention':>14} {'ms':>7}")
    total = 0.0
    for name, each, count in rows:
        total += each * count
        print(f"{name:52} {each:7.2f} {count:14d} {each * count:7.1f}")
    print(f"{'(for comparison) the same statement via psycopg alone':52} {driver_ms:7.2f}")
    without_database = total - (statement_ms + backend_ms) * STATEMENTS_PER_MESSAGE
    print(f"the same without a single database statement: {without_database:.1f} ms CPU")
    print(f"sum of the floors for one @-mention: {total:.1f} ms CPU -> at most {CORES * 1000 / total:.0f} msg/s on")
    print(f"{CORES} cores with nothing else running (issue 11's goal: ~20 ms per message, 100 msg/s)")
    print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__" and "--stubs" in sys.argv:
    _serve_stubs(sys.argv[sys.argv.index("--stubs") + 1])
