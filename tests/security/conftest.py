"""The security suites drive the real Feishu webhook: they reuse the bridge's stub server and bot fixtures."""

from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401  (fixtures)
