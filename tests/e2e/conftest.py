from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401 - shared fixtures
