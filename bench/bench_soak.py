"""Soak (issue 28, goal 4): the pipeline bench's mix at a steady rate for a long time; what must not drift.

The hub as `python -m bench pipeline` starts it (gunicorn, beat, the Procfile's two workers: `worker` prefork for
the short tasks and `turns` with a thread pool; PostgreSQL and Redis; the Feishu and LLM stubs in a child
process), then one open-loop load process offering the pipeline's mix (@-mentions, topic replies, discuss
messages, DMs, REST posts) at `--rate` messages/s (default 10) for `--minutes` (default 30; `--minutes 3` for a
smoke run). Nothing is purged while it runs. Reported:
- per process (web, workers, beat): RSS at the end of the warm-up (the first WARMUP_FRACTION of the run, at
  least a minute) and at the end, and its slope in MiB/hour by least squares over the samples after the warm-up
  (goal <= 16 MiB/h; LangBot's 24 h gate allows 32);
- the backlog (queue depth + pending inbound events + unfinished turns): mean of the last third of the run
  against the first third after warm-up, and its maximum (goal: flat);
- overhead (webhook POST -> reply complete at the Feishu stub - model latency) p99 of the messages sent in the
  last WINDOW against those sent in the first one after the warm-up (WINDOW = 5 minutes, or a third of a
  shorter run; goal <= 1.2x);
- lost (an addressed Feishu message without a reply, or a REST turn not delivered) and duplicated (a message with
  more than one reply at the stub): goal 0 and 0.
Flags: `--minutes 30`, `--rate 10`, and the pipeline bench's `--model-seconds`, `--cards`, `--turn-threads`.
Needs PostgreSQL and Redis (DATABASE_URL, REDIS_URL) like the pipeline bench.
"""

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import bench_pipeline as pipeline
from bench.answers import answered_at, percentile, phase_turns

MINUTES = 30.0
RATE = 10
WARMUP_FRACTION = 0.15
WINDOW_SECONDS = 300
DRAIN_SECONDS = 90


def _slope_mib_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) points, in MiB per hour."""
    if len(points) < 3:
        return float("nan")
    mean_t = statistics.fmean(t for t, _ in points)
    mean_v = statistics.fmean(v for _, v in points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if not spread:
        return float("nan")
    return 3600 * sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def _overheads(posts: list[dict], replies: dict[str, float], model_seconds: float, since: float, until: float):
    return [
        replies[post["id"]] - post["sent"] - model_seconds
        for post in posts
        if post["kind"] in ("mention", "topic", "dm") and post["id"] in replies and since <= post["sent"] < until
    ]


def _rss_report(sampler, started: float, warm: float) -> list[str]:
    lines = []
    with sampler.lock:
        history = list(sampler.rss_history)
    by_process: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for at, sizes in history:
        if at >= warm:
            for key, mib in sizes.items():
                by_process.setdefault(key, []).append((at - started, mib))
    worst = 0.0
    for (group, pid), points in sorted(by_process.items()):
        if not points or max(v for _, v in points) < 5:
            continue  # a shell or helper process of a few MiB
        slope = _slope_mib_per_hour(points)
        worst = max(worst, slope if slope == slope else 0.0)
        lines.append(
            f"    {group:7} pid {pid:>7}: {points[0][1]:7.1f} -> {points[-1][1]:7.1f} MiB, slope {slope:+7.1f} MiB/h"
        )
    verdict = "met" if worst <= 16 else "NOT met"
    span = (history[-1][0] - warm) / 60 if history else 0.0
    return [
        f"  RSS per process over {span:.0f} min after the warm-up (goal <= 16 MiB/h: {verdict}, worst {worst:+.1f}; "
        "a slope over less than 20 minutes mostly measures the warm-up's tail):",
        *lines,
    ]


def run() -> None:
    minutes = float(pipeline._flag("--minutes", str(MINUTES)))
    rate = int(pipeline._flag("--rate", str(RATE)))
    seconds = int(minutes * 60)
    model_seconds = pipeline._model_seconds()
    with pipeline.hub("bench_soak") as context:
        if context is None:
            return
        started_workers, ready = pipeline._workers_start(1, "procfile", context["env"], context["tmp"])
        context["processes"] += started_workers
        pipeline._wait_for(lambda: all(path.exists() for path in ready), "the workers", seconds=180)
        sampler = pipeline.Sampler(
            context["database_url"],
            context["redis_url"],
            pipeline.worker_groups(context, started_workers, "procfile"),
        )
        context["sampler"] = sampler
        sampler.start()
        out_file = Path(context["tmp"], "load_soak.json")
        print(
            f"soak: {pipeline._layout_text(1, 'procfile')}; model {model_seconds:g} s; {rate}/s for {minutes:g} min",
            flush=True,
        )
        subprocess.run(
            [sys.executable, "-m", "bench.bench_pipeline", "--load", context["base"], context["setup_file"]]
            + [str(rate), str(seconds), "soak", str(out_file)],
            cwd=pipeline.ROOT,
            env=context["env"],
            check=True,
            timeout=seconds * 3 + 900,
        )
        load_end = time.monotonic()
        drained_after = None
        while time.monotonic() - load_end < max(DRAIN_SECONDS, 2 * model_seconds + 10):
            depth, rows = sampler.sample()
            if depth + rows == 0:
                drained_after = time.monotonic() - load_end
                break
            time.sleep(1)
        time.sleep(2)
        load = json.loads(out_file.read_text())
        answers = pipeline._replies(context["tmp"], context["stubs"])
        turns = dict(sampler.db.execute("SELECT status, count(*) FROM agents_turn GROUP BY status").fetchall())
        # A message collected into another turn (queue mode collect) is answered by that turn's reply.
        answers["replies"] = answered_at(phase_turns(sampler.db, prefix="om_soak_"), answers["replies"])
        sampler.stopping.set()
        print(_report(load, answers, sampler, turns, load_end, drained_after, model_seconds), flush=True)


def _report(load, answers, sampler, turns, load_end, drained_after, model_seconds) -> str:
    posts, replies, counts = load["posts"], answers["replies"], answers["reply_counts"]
    started = load["started"]
    duration = load_end - started
    warm = started + max(60.0, WARMUP_FRACTION * duration)
    window = min(WINDOW_SECONDS, (load_end - warm) / 2)
    first = _overheads(posts, replies, model_seconds, warm, warm + window)
    last = _overheads(posts, replies, model_seconds, load_end - window, load_end)
    p99_first, p99_last = percentile(first, 0.99), percentile(last, 0.99)
    addressed = [post for post in posts if post["kind"] in ("mention", "topic", "dm")]
    lost = [post["id"] for post in addressed if post["id"] not in replies]
    duplicated = {parent: n for parent, n in counts.items() if n > 1}
    rest_posts = sum(1 for post in posts if post["kind"] == "rest")
    unfinished = sum(n for status, n in turns.items() if status not in ("delivered", "skipped"))
    with sampler.lock:
        backlog = [(at, depth + rows) for at, depth, rows in sampler.backlog if warm <= at <= load_end]
    third = max(1, len(backlog) // 3)
    values = [value for _, value in backlog] or [0]
    growth = statistics.fmean(values[-third:]) - statistics.fmean(values[:third])
    non_2xx = sum(1 for post in posts if post["status"] not in (200, 202))
    lines = [
        f"  offered {len(posts)} messages in {duration:.0f} s ({len(posts) / max(duration, 1):.1f}/s), "
        f"{non_2xx} non-2xx; warm-up {warm - started:.0f} s excluded",
        f"  backlog after the warm-up: max {max(values)}, last third minus first third {growth:+.1f} -> "
        + ("flat" if growth <= max(2.0, 0.1 * max(values)) else "GROWING")
        + (f"; drained {drained_after:.1f} s after the load" if drained_after is not None else "; NOT drained"),
        f"  overhead p99 first {window:.0f} s after warm-up {p99_first:.2f} s, last {window:.0f} s {p99_last:.2f} s: "
        f"{p99_last / p99_first if p99_first > 0 else float('nan'):.2f}x (goal <= 1.2x); p50 overall "
        f"{statistics.median(first + last) if first + last else float('nan'):.2f} s",
        f"  lost: {len(lost)} of {len(addressed)} addressed Feishu messages without a reply (of their own or of the turn"
        " that collected them)"
        + (f" (e.g. {', '.join(lost[:3])})" if lost else "")
        + f"; {unfinished} turns not delivered (REST included: {rest_posts} posts); duplicated: {len(duplicated)} "
        f"with more than one reply; turns by status {turns}",
        *_rss_report(sampler, started, warm),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    run()
