"""The call log: one Kinesis record per tool call, job failure, probe failure and schema drift."""
