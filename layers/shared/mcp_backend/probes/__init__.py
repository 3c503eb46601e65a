"""Endpoint probes: registry (MCP tools), dispatcher, worker (an MCP client), recorder and alerts."""
