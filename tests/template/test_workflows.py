"""CI credentials only where they deploy: the jobs that install packages and run tests cannot get an OIDC token."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from devstack.runtime.interpreter import DEPLOY_VERSION, RUNTIME_VERSION
from devstack.stack.template import ROOT, load_template

WORKFLOWS = {path.name: yaml.safe_load(path.read_text()) for path in (ROOT / ".github" / "workflows").glob("*.yml")}


def job_permissions(workflow: dict, job: dict) -> dict:
    """A job's own permissions replace the workflow's."""
    return job.get("permissions", workflow.get("permissions", {}))


def runs(job: dict) -> str:
    return "\n".join(str(step.get("run", "")) for step in job.get("steps", []))


TESTING = re.compile(r"make (lint|test|unit|integration|e2e)\b")


def runs_tests(job: dict) -> bool:
    return TESTING.search(runs(job)) is not None


def test_only_a_deploy_job_that_runs_no_tests_may_request_an_oidc_token():
    # Given every job of every workflow
    jobs = [
        (name, job_id, workflow, job)
        for name, workflow in WORKFLOWS.items()
        for job_id, job in workflow["jobs"].items()
    ]
    assert any(runs_tests(job) for *_, job in jobs)

    for name, job_id, workflow, job in jobs:
        permissions = job_permissions(workflow, job)
        # Then whatever installs dependencies and runs the tests has no id-token permission
        if runs_tests(job):
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


def steps(job: dict) -> list[dict]:
    return list(job.get("steps", []))


def test_every_action_is_pinned_to_a_full_commit_sha_with_its_tag_beside_it():
    # Given every `uses:` line of every workflow, as written (the comment holds the tag)
    lines = [
        line.strip()
        for path in (ROOT / ".github" / "workflows").glob("*.yml")
        for line in path.read_text().splitlines()
        if line.strip().startswith(("uses:", "- uses:"))
    ]
    assert lines
    for line in lines:
        # Then each names a 40-hex commit, never a movable tag or branch, and says which tag that commit is
        assert re.search(r"@[0-9a-f]{40} # v\d+(\.\d+)*$", line), line


def test_the_job_with_credentials_runs_on_main_only_and_smoke_tests_what_it_deployed():
    deploy = WORKFLOWS["deploy.yml"]["jobs"]["deploy"]
    # A dispatched branch skips it (and the main-only job says why); the trust policy refuses it too
    assert deploy["if"] == "github.ref == 'refs/heads/main'"
    assert WORKFLOWS["deploy.yml"]["jobs"]["main-only"]["if"] == "github.ref != 'refs/heads/main'"
    commands = [str(step.get("run", "")) for step in steps(deploy)]
    uses = [str(step.get("uses", "")) for step in steps(deploy)]
    credentials = uses.index(next(u for u in uses if u.startswith("aws-actions/configure-aws-credentials@")))
    installed = next(i for i, c in enumerate(commands) if "make build expanded sam-cli smoke-env" in c)
    deployed = next(i for i, c in enumerate(commands) if "make deploy-built" in c)
    verified = next(i for i, c in enumerate(commands) if "make verify-deployed" in c)
    smoked = next(i for i, c in enumerate(commands) if "make smoke-deployed" in c)
    # It builds and installs everything before the credentials exist; after the deploy the live stack is compared
    # with the template and smoke-tested, and either may fail the run
    assert installed < credentials < deployed < verified < smoked
    assert not any("continue-on-error" in steps(deploy)[i] for i in (deployed, verified, smoked))


def test_the_deploy_job_builds_from_its_own_checkout_runs_no_tests_and_installs_nothing_unpinned():
    deploy = WORKFLOWS["deploy.yml"]["jobs"]["deploy"]
    commands = runs(deploy)
    uses = [str(step.get("uses", "")) for step in steps(deploy)]
    # Then it runs no test suite (nor the browser install, nor anything from a package manager by name)
    assert not runs_tests(deploy)
    assert not re.search(r"apt-get|pip install|npm (install|i)\b|make (browser|env)\b|pytest", commands)
    # And deploys what its own checkout builds, not an artifact another job's environment could have changed
    assert not [u for u in uses if u.startswith(("actions/download-artifact@", "actions/cache@"))]
    assert any(u.startswith("actions/checkout@") for u in uses)
    # And its smoke check runs from the minimal hashed environment, not the test environment (.venv)
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nsmoke-deployed:")[1].split("\n\n")[0]
    assert "$(SMOKE_PYTHON) -m tests.deployed.key_session" in recipe and "$(RUN)" not in recipe
    assert "$(PIP_HASHED) -r $(SMOKE_REQUIREMENTS)" in makefile


def test_the_deploy_job_runs_and_builds_with_exact_interpreter_versions():
    # Given the deploy job and the interpreter the layers are compiled with
    deploy = WORKFLOWS["deploy.yml"]["jobs"]["deploy"]
    versions = [step["with"]["python-version"] for step in steps(deploy) if "python-version" in step.get("with", {})]
    # Then the tools' interpreter is one exact release, not the newest of a minor line
    assert versions and all(re.fullmatch(r"\d+\.\d+\.\d+", version) for version in versions), versions
    # And the build requires the exact Lambda-runtime interpreter (it fails rather than compile with another)
    assert "EXACT_PYTHON=1" in runs(deploy).split("make build ")[1].splitlines()[0]
    recipe = (ROOT / "Makefile").read_text().split("\nbuild:")[1].split("\n\n")[0]
    assert "$(if $(EXACT_PYTHON),--exact --install," in recipe and '|| [ -z "$(EXACT_PYTHON)" ] || exit 2' in recipe
    # And that interpreter is a release of the template's runtime
    assert DEPLOY_VERSION.startswith(f"{RUNTIME_VERSION}.")
    assert load_template().expanded["Resources"]["McpServer"]["Properties"]["Runtime"] == f"python{RUNTIME_VERSION}"


def test_the_smoke_environment_is_what_a_function_has_and_holds_no_test_runner():
    # Given the smoke check's hashed requirement file (make layer-requirements exports it from uv.lock)
    lines = (ROOT / "tests" / "deployed" / "requirements.txt").read_text().splitlines()
    pinned = {line.split("==")[0] for line in lines if "==" in line and not line.startswith((" ", "#"))}
    # Then every pin is hashed, boto3 and the MCP SDK are there, and no pytest or plugin is
    assert {"boto3", "mcp", "pydantic"} <= pinned
    assert not {name for name in pinned if name.startswith("pytest") or name in {"hypothesis", "moto"}}
    assert all(lines[i + 1].strip().startswith("--hash=sha256:") for i, line in enumerate(lines)
               if "==" in line and not line.startswith((" ", "#")))  # fmt: skip
    # And the smoke check imports nothing of pytest
    for module in ("smoke.py", "key_session.py"):
        assert "pytest" not in (ROOT / "tests" / "deployed" / module).read_text().split('"""', 2)[2], module


def test_dependabot_watches_the_actions_the_lock_and_the_tool_locks():
    config = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text())
    ecosystems = {
        (u["package-ecosystem"], tuple(u.get("directories", [u.get("directory")]))) for u in config["updates"]
    }
    assert ("github-actions", ("/",)) in ecosystems and ("uv", ("/",)) in ecosystems
    tools = {d for ecosystem, dirs in ecosystems if ecosystem == "uv" for d in dirs}
    assert {f"/tools/{tool}" for tool in TOOLS} <= tools


TOOLS = ("uv", "aws-sam-cli", "checkov")


@pytest.mark.parametrize("tool", TOOLS)
def test_each_tool_requirement_file_is_its_locks_export_with_a_hash_for_every_pin(tool, tmp_path):
    uv = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    if not Path(uv).exists():
        pytest.skip("uv is bootstrapped by `make env`")
    exported = tmp_path / "requirements.txt"
    subprocess.run(
        [uv, "export", "--quiet", "--frozen", "--project", f"tools/{tool}", "--no-emit-project", "--no-header",
         "--output-file", str(exported)],
        cwd=ROOT, check=True,
    )  # fmt: skip
    checked_in = (ROOT / "tools" / tool / "requirements.txt").read_text()
    assert exported.read_text() == checked_in, f"run `make tool-requirements` ({tool})"
    lines = checked_in.splitlines()
    pinned = [i for i, line in enumerate(lines) if "==" in line and not line.startswith((" ", "#"))]
    assert pinned and all(lines[i + 1].strip().startswith("--hash=sha256:") for i in pinned), tool
    makefile = (ROOT / "Makefile").read_text()
    assert f"--require-hashes -r tools/{tool}/requirements.txt" in makefile.replace("$(PIP_HASHED)", "--require-hashes")


def test_ci_runs_lint_and_each_test_tier_as_its_own_job():
    # Given the pull-request workflow
    jobs = WORKFLOWS["ci.yml"]["jobs"]

    # Then lint and every tier run, each in a job of its own, so the fast ones report first
    for target in ("lint", "unit", "integration", "e2e"):
        owners = [job_id for job_id, job in jobs.items() if re.search(rf"make {target}\b", runs(job))]
        assert owners == [target], (target, owners)
