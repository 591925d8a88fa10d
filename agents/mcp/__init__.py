"""Tools through MCP (ARCHITECTURE M1): a synchronous client on the official `mcp` SDK for the turn pipeline.

`client.McpConnection` keeps one server session open on a per-process event-loop thread; `output` turns a
tool's answer into text a model may read (storable, secrets redacted, capped); `services` reads a bot's
`McpServer` rows into configs and runs the admin's "Test".
"""
