"""MonitorTable: registered MCP endpoints and their probe results, told apart by `itemType`, and the
two consumers of its stream (schema drift on new results, daily rollups of expired ones)."""
