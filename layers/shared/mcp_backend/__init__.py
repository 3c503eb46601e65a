"""Code shared by every function of the MCP backend; shipped once, in the shared layer."""
