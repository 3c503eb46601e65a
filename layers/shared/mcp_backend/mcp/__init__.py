"""The MCP endpoint: the SDK's stateless Streamable HTTP server, its HTTP guard, auth and job tools."""
