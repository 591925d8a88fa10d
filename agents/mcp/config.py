"""What a connection needs to know about one server, as a frozen value (the per-process pool's key)."""

from dataclasses import dataclass

STDIO = "stdio"
STREAMABLE_HTTP = "streamable_http"


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    transport: str  # STDIO | STREAMABLE_HTTP
    command: str = ""
    args: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()  # tuples, not dicts: the config is hashable
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    connect_timeout_seconds: float = 20.0
    call_timeout_seconds: float = 30.0

    def secrets(self) -> tuple[str, ...]:
        """Every value of the environment and the headers: none of them may reach a model, a log or a record."""
        return tuple(value for _, value in self.environment + self.headers if value)

    def __repr__(self) -> str:  # a config in a traceback or log line must not print its secrets
        return f"McpServerConfig(name={self.name!r}, transport={self.transport!r})"
