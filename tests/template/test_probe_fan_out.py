"""The probes' fan-out is bounded: ProbeWorker has reserved concurrency from a parameter whose default is far under
the account's default concurrency, and the dispatcher's per-owner budget comes from a parameter."""

from __future__ import annotations

from tests.template.test_invariants import EXPANDED, RESOURCES, resolve

# Lambda's default quota of concurrent executions per account and Region
# (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
ACCOUNT_DEFAULT_CONCURRENCY = 1000
PROBE_WORKER = RESOURCES["ProbeWorker"]["Properties"]
DISPATCHER_ENVIRONMENT = RESOURCES["ProbeDispatcher"]["Properties"]["Environment"]["Variables"]


def test_probe_worker_is_capped_by_default_far_under_the_accounts_concurrency():
    # Given the default parameters, then ProbeWorkerReservedConcurrency=0 and =100
    # When ProbeWorker's reserved concurrency is resolved
    default = int(resolve(PROBE_WORKER)["ReservedConcurrentExecutions"])

    # Then it is capped by default at a tenth of the account's default or less, absent for 0, the parameter otherwise
    assert 0 < default <= ACCOUNT_DEFAULT_CONCURRENCY // 10
    assert default == int(EXPANDED["Parameters"]["ProbeWorkerReservedConcurrency"]["Default"])
    assert "ReservedConcurrentExecutions" not in resolve(PROBE_WORKER, ProbeWorkerReservedConcurrency=0)
    assert int(resolve(PROBE_WORKER, ProbeWorkerReservedConcurrency=100)["ReservedConcurrentExecutions"]) == 100


def test_the_dispatchers_per_owner_budget_is_the_parameter():
    # Given the default parameters, then a budget of 2 / When the dispatcher's environment is resolved
    # Then its budget is the parameter's
    default = EXPANDED["Parameters"]["ProbesPerOwnerPerTick"]["Default"]
    assert int(resolve(DISPATCHER_ENVIRONMENT)["PROBES_PER_OWNER_PER_TICK"]) == int(default)
    assert int(resolve(DISPATCHER_ENVIRONMENT, ProbesPerOwnerPerTick=2)["PROBES_PER_OWNER_PER_TICK"]) == 2
