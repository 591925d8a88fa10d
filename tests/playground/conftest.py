from tests.feishu.conftest import feishu_stub, make_feishu_bot  # noqa: F401  (fixtures: the local Feishu, bots)
