"""The errors an MCP server can end a call in; each message is readable by an operator and holds no secret."""


class McpError(Exception):
    def __init__(self, message: str, *, server: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.server = server


class McpConnectError(McpError):
    """The server did not start, did not answer the handshake within the connect timeout, or refused us."""


class McpTimeoutError(McpError):
    """A call did not answer within its timeout (the server may still be working on it)."""


class McpConnectionLostError(McpError):
    """The server went away mid-session (a crashed process, a dropped HTTP session)."""


class McpCallError(McpError):
    """The server answered the call with a protocol error (bad arguments, unknown tool, ...)."""
