"""Local twins of Lambda's event sources, driven by the expanded template's mappings."""
