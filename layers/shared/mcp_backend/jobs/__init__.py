"""The asynchronous tool-job pipeline: job-queue messages, job state, and the worker's logic."""
