"""Every periodic task of the hub, declared here and nowhere else (base.py imports it as CELERY_BEAT_SCHEDULE;
DatabaseScheduler copies it into the database at beat's start). The feishu entries keep their historical task names
(`amuxweb.feishu.*`): beat rows and queued messages written before the bridge moved to `feishu/` still resolve to
the same tasks."""

from amuxweb.env import env

BEAT_SCHEDULE = {
    # L2: the one turn sweeper, every trigger: lost enqueues, runs left running, replies left undelivered
    # (agents.services.turns.sweep).
    "agents-turns-sweep": {"task": "agents.tasks.turns_sweep_task", "schedule": 60.0},
    # Discuss wakes past due whose fire task was lost (or waits for its retry) get a fire task again.
    "feishu-discuss-wakes-sweep": {"task": "amuxweb.feishu.discuss.discuss_wakes_sweep", "schedule": 5.0},
    # Inbound events acknowledged but still pending FEISHU_SWEEP_PENDING_AFTER_SECONDS after they were stored
    # (broker down, worker killed) are re-enqueued, and undelivered notices retried.
    "feishu-inbound-sweep": {"task": "amuxweb.feishu.tasks.inbound_events_sweep", "schedule": 30.0},
    # Daily. F2 needs inbound events past Feishu's 7.1 h retry window: finished inbound events and discuss wakes
    # are kept AMUX_CONTEXT_RETENTION_DAYS, a sandbox bot's recorded Feishu calls AMUX_SANDBOX_CALL_RETENTION_DAYS.
    "feishu-bridge-prune": {"task": "amuxweb.feishu.tasks.bridge_records_prune", "schedule": 24 * 3600.0},
    # Probe judgements past their 30-day retention, daily.
    "probe-judgements-prune": {"task": "probe.tasks.judgements_prune_task", "schedule": 24 * 3600.0},
    # C13: the daily retention sweep for quiet hubs (writes also prune, at most once a minute per process).
    "thread-context-prune": {"task": "threadcontext.tasks.thread_context_prune", "schedule": 24 * 3600.0},
    # A6: every Feishu app's credentials checked against Feishu, so a revoked secret shows on the dashboard.
    "feishu-credentials-verify": {
        "task": "feishu.tasks.feishu_credentials_verify_all_task",
        "schedule": env.float("FEISHU_CREDENTIALS_VERIFY_SECONDS", default=6 * 3600.0),
    },
}
