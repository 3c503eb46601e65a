"""The call log: one Kinesis record per tool call, tool error, job failure, schema drift and platform report."""
