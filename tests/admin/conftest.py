"""The admin tests drive real gate runs: the probe tests' judge and bot fixtures."""

from tests.probe.conftest import _fresh_gate_config_cache, make_discuss_bot, make_judge  # noqa: F401
