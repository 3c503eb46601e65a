"""CI credentials only where they deploy: the jobs that install packages and run tests cannot get an OIDC token."""

from __future__ import annotations

from pathlib import Path

import yaml

from devstack.template import ROOT

WORKFLOWS = {path.name: yaml.safe_load(path.read_text()) for path in (ROOT / ".github" / "workflows").glob("*.yml")}


def job_permissions(workflow: dict, job: dict) -> dict:
    """A job's own permissions replace the workflow's."""
    return job.get("permissions", workflow.get("permissions", {}))


def runs(job: dict) -> str:
    return "\n".join(str(step.get("run", "")) for step in job.get("steps", []))


def test_only_a_deploy_job_that_runs_no_tests_may_request_an_oidc_token():
    # Given every job of every workflow
    jobs = [
        (name, job_id, workflow, job)
        for name, workflow in WORKFLOWS.items()
        for job_id, job in workflow["jobs"].items()
    ]
    assert any("make lint test" in runs(job) for *_, job in jobs)

    for name, job_id, workflow, job in jobs:
        permissions = job_permissions(workflow, job)
        # Then whatever installs dependencies and runs the tests has no id-token permission
        if "make lint test" in runs(job) or "make test" in runs(job):
            assert permissions.get("id-token") != "write", (name, job_id)
        # And a job that may request the token deploys the tested build in a GitHub environment
        if permissions.get("id-token") == "write":
            assert "make deploy-built" in runs(job) and "environment" in job and job.get("needs"), (name, job_id)
    assert all(workflow.get("permissions", {}).get("id-token") is None for workflow in WORKFLOWS.values())


def test_the_workflow_deploys_environments_samconfig_describes():
    samconfig = (Path(ROOT) / "samconfig.toml").read_text()
    options = WORKFLOWS["deploy.yml"][True]["workflow_dispatch"]["inputs"]["environment"]["options"]
    for environment in options:
        assert f"[{environment}.deploy.parameters]" in samconfig, environment
