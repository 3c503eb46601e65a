# One entry point for developers and CI. Needs only Python 3.11+ and the package registries:
# uv is bootstrapped into .tools/, the test environment comes from uv.lock, and aws-sam-cli
# (which pins its own boto3) and checkov live in isolated environments of their own. Everything installed is
# pinned by hash: uv, the sam CLI and checkov from tools/<tool>/requirements.txt (exported from
# tools/<tool>/uv.lock by `make tool-requirements`), the layers from uv.lock's export with hashes.
SHELL := /bin/bash
PYTHON ?= python3
TOOLS := $(CURDIR)/.tools
UV := $(TOOLS)/bin/uv
SAM := $(TOOLS)/bin/sam
CHECKOV := $(TOOLS)/bin/checkov
# The sam CLI's own interpreter (it has boto3): the deploy steps run with it, so a deploy job needs nothing else.
SAM_PYTHON := $(TOOLS)/aws-sam-cli/bin/python
# Each tool's version is pinned in tools/<tool>/pyproject.toml; its lock and hashed export sit beside it.
TOOL_NAMES := uv aws-sam-cli checkov
# --no-deps: the file is the whole locked environment (pip would re-resolve extras it cannot hash-check).
PIP_HASHED := --quiet --disable-pip-version-check --require-hashes --no-deps
RUN := $(UV) run --frozen --no-sync
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/.venv
ENV ?= default
# Instruction set of the build: arm64 deploys; `make build ARCH=x86_64` builds for an x86_64 host so the
# local Lambda runtime (make dev RUNTIME=lambda) can run the artifacts. Each ARCH has its own sam cache.
ARCH ?= arm64
HOST_ARCH := $(subst aarch64,arm64,$(shell uname -m))
BUILD_DIR ?= .aws-sam/build
# make test checks the arm64 deploy artifacts in .aws-sam/build and runs the host-architecture build
# (the same dir on an arm64 host) in the local Lambda runtime.
LOCAL_BUILD_DIR := $(if $(filter arm64,$(HOST_ARCH)),.aws-sam/build,.aws-sam/build-$(HOST_ARCH))
LAYER_REQUIREMENTS ?= layers/shared/requirements.txt
MCP_LAYER_REQUIREMENTS ?= layers/mcp/requirements.txt
DURABLE_LAYER_REQUIREMENTS ?= layers/durable/requirements.txt
# The deployed-stack smoke check's environment: what a deployed function has (both layers, the runtime's boto3).
SMOKE_REQUIREMENTS ?= tests/deployed/requirements.txt
SMOKE_PYTHON := $(TOOLS)/smoke/bin/python
FUNCTION ?= ToolWorker
PORT ?= 4566
RUNTIME ?= inprocess
EVENT ?= events/tool_worker/healthy-batch.json
# The layer ships everything the lock pins except what the Lambda runtime provides.
RUNTIME_PROVIDED := boto3 botocore s3transfer python-dateutil six urllib3

.PHONY: help env hooks lint test test-any-date test-contended unit integration e2e coverage build build-local deploy deploy-built sam-cli smoke \
	smoke-env smoke-deployed verify-deployed \
	delete invoke env-json browser dev trace fire token redrive bench cost layer-requirements tool-requirements expanded clean

# `make help`: every target with the text after its `##`.
help: ## this list
	@awk -F':.*## ' '/^[a-zA-Z0-9_-]+:.*## / {printf "  make %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(UV): tools/uv/requirements.txt
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install $(PIP_HASHED) -r tools/uv/requirements.txt
	@touch $@

# Each tool in a virtual environment of its own (the sam CLI pins an older boto3 than the project), installed
# only from its hashed requirement file; .tools/bin/<tool> links to it.
$(SAM): tools/aws-sam-cli/requirements.txt | $(UV)
	rm -rf $(TOOLS)/aws-sam-cli && $(PYTHON) -m venv $(TOOLS)/aws-sam-cli
	$(TOOLS)/aws-sam-cli/bin/pip install $(PIP_HASHED) -r tools/aws-sam-cli/requirements.txt
	ln -sf $(TOOLS)/aws-sam-cli/bin/sam $@

sam-cli: $(SAM) ## the pinned aws-sam-cli in its own tool environment (.tools/bin/sam)

$(CHECKOV): tools/checkov/requirements.txt | $(UV)
	rm -rf $(TOOLS)/checkov && $(PYTHON) -m venv $(TOOLS)/checkov
	$(TOOLS)/checkov/bin/pip install $(PIP_HASHED) -r tools/checkov/requirements.txt
	ln -sf $(TOOLS)/checkov/bin/checkov $@

# Re-lock a tool after changing its pin in tools/<tool>/pyproject.toml (or to take its dependencies' fixes),
# and export every lock with hashes. A test holds each requirements.txt equal to its lock's export.
tool-requirements: $(UV) ## re-lock the isolated tools and export their hashed requirement files
	@for tool in $(TOOL_NAMES); do \
		$(UV) lock --quiet --project tools/$$tool && \
		$(UV) export --quiet --frozen --project tools/$$tool --no-emit-project --no-header \
			--output-file tools/$$tool/requirements.txt || exit 1; \
	done

env: $(UV) ## the test environment (.venv) from uv.lock; uv bootstrapped into .tools/
	$(UV) sync --frozen --quiet

# The hooks run the pinned tools in .venv (.pre-commit-config.yaml), so they agree with `make lint`.
hooks: env ## install the git pre-commit hook (ruff, mypy, cfn-lint, import graph on each commit)
	$(RUN) pre-commit install

# The core layer: the project's dependencies. The MCP layer: the mcp-layer group without what the core layer
# already ships (both are on the functions that have the MCP layer). The durable layer: the durable-layer group
# without what the core layer ships (both are on DurableToolWorker).
layer-requirements: $(UV) ## export the layers' (and the smoke check's) pinned requirements, with hashes, from uv.lock
	$(UV) export --frozen --no-default-groups --no-header --no-emit-project \
		$(addprefix --no-emit-package ,$(RUNTIME_PROVIDED)) --output-file $(LAYER_REQUIREMENTS) --quiet
	$(UV) export --frozen --only-group mcp-layer --no-header --no-emit-project \
		$(addprefix --no-emit-package ,$(RUNTIME_PROVIDED)) \
		$$(sed -n 's/^\([A-Za-z0-9._-]*\)==.*/--no-emit-package \1/p' $(LAYER_REQUIREMENTS)) \
		--output-file $(MCP_LAYER_REQUIREMENTS) --quiet
	$(UV) export --frozen --only-group durable-layer --no-header --no-emit-project \
		$(addprefix --no-emit-package ,$(RUNTIME_PROVIDED)) \
		$$(sed -n 's/^\([A-Za-z0-9._-]*\)==.*/--no-emit-package \1/p' $(LAYER_REQUIREMENTS)) \
		--output-file $(DURABLE_LAYER_REQUIREMENTS) --quiet
	$(UV) export --frozen --no-default-groups --group mcp-layer --group lambda-runtime-provided --no-header \
		--no-emit-project --output-file $(SMOKE_REQUIREMENTS) --quiet

build/expanded-template.json: template.yaml env
	$(RUN) python -m devstack.stack.template $@

expanded: build/expanded-template.json ## write the SAM expansion of template.yaml (what tests and make dev read)

lint: env $(SAM) $(CHECKOV) build/expanded-template.json ## ruff, mypy, import-graph, cfn-lint, sam validate --lint, checkov
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy
	$(RUN) pytest -q -p no:cacheprovider tests/unit/test_import_graph.py tests/unit/test_table_owners.py
	$(RUN) cfn-lint --append-rules cfn_lint_serverless.rules -- template.yaml
	$(RUN) cfn-lint --append-rules cfn_lint_serverless.rules -- build/expanded-template.json
	$(RUN) cfn-lint -- deploy/github-oidc-role.yaml deploy/permissions-boundary.yaml
	$(SAM) validate --lint --template template.yaml --region us-east-1
	$(CHECKOV) --config-file .checkov.yaml --file template.yaml --file build/expanded-template.json \
		--file deploy/github-oidc-role.yaml --file deploy/permissions-boundary.yaml

# Test tiers, fastest first (docs/testing.md). unit: no build, no sandbox, no moto stack. integration: the
# handlers and the local stack on moto, in-process, on both cores. e2e: the host-architecture build in
# Lambda-shaped sandboxes through AWS's Runtime Interface Client, on both cores (its tests mostly wait on
# sandboxes and loopback; the ones that start `make dev` share one xdist group), and the checks of the deploy build.
PYTEST := $(RUN) pytest -q -p no:cacheprovider
# Each tier measures line coverage of the layer package and the handlers ([tool.coverage] in pyproject.toml) into
# its own directory under build/coverage/ (the last run of each tier counts; coverage's parallel files of one tier
# never meet another's); `make coverage` combines what the tiers left. `make <tier> COV=` runs one unmeasured.
COVERAGE_DIR := build/coverage
COVERAGE_TIERS := unit integration e2e
COV = --cov --cov-report= --cov-config=pyproject.toml
coverage_of = mkdir -p $(COVERAGE_DIR)/$(1) && COVERAGE_FILE=$(COVERAGE_DIR)/$(1)/.coverage
UNIT_COVERAGE := $(call coverage_of,unit)
INTEGRATION_COVERAGE := $(call coverage_of,integration)
E2E_COVERAGE := $(call coverage_of,e2e)

unit: env ## unit tier: no build, no sandbox, no moto stack (under a minute)
	$(UNIT_COVERAGE) $(PYTEST) $(COV) -n 2 tests/unit tests/template -m "not build"

# Headless Chromium for the browser client test (tests/e2e/test_mcp_browser.py). In CI (CI=true) it is installed
# from the distribution's packages when missing and apt-get is there (as root, or with passwordless sudo);
# elsewhere nothing is installed and the test skips, naming what it needs.
BROWSERS := chromium chromium-browser google-chrome google-chrome-stable
browser: ## with CI=true, Debian's chromium for the browser client test when none is on PATH
	@for name in $(BROWSERS); do if command -v $$name >/dev/null 2>&1; then exit 0; fi; done; \
	if [ "$${CI:-}" = true ] && command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends chromium; \
	fi

integration: env ## integration tier: handlers and the local stack on moto, in-process
	$(INTEGRATION_COVERAGE) $(PYTEST) $(COV) -n 2 tests/functions

e2e: env build-local ## e2e tier: the build output in the Lambda-shaped runtime, and the deploy build's checks
	$(E2E_COVERAGE) DEVSTACK_RUNTIME=lambda DEVSTACK_BUILD_DIR=$(LOCAL_BUILD_DIR) $(PYTEST) $(COV) -n 2 --dist loadgroup tests/e2e
	$(PYTEST) tests/template -m build

# The functions the e2e tier runs in sandboxes (separate python3.13 processes) are not measured: the e2e figure is
# what its test process runs in-process (docs/testing.md).
coverage: env ## line coverage of mcp_backend and functions over the tiers run last (FORMAT=markdown for CI)
	@files="$$(for tier in $(COVERAGE_TIERS); do f=$(COVERAGE_DIR)/$$tier/.coverage; [ -f $$f ] && echo $$f; done)"; \
		if [ -z "$$files" ]; then echo "no coverage data: run make unit, integration or e2e first" >&2; exit 2; fi; \
		echo "coverage of the tiers run last: $$files" >&2; \
		$(RUN) coverage combine --quiet --keep --data-file=$(COVERAGE_DIR)/.coverage $$files && \
		$(RUN) coverage report --data-file=$(COVERAGE_DIR)/.coverage $(if $(FORMAT),--format=$(FORMAT))

test: lint unit integration test-any-date build browser e2e ## lint + build + every tier, and two tiers at other dates (CI)

# The unit and integration tiers with every core saturated by a CPU burner (tests/cpu_burner.py: one spinning process
# per core, ended when the tiers end): a test that depends on timing or prompt thread scheduling fails here, not on a
# loaded CI machine (docs/testing.md, "Under CPU contention"). TIERS=unit runs one tier.
TIERS ?= unit integration
test-contended: env ## the unit and integration tiers while a CPU burner saturates every core (TIERS=unit: one)
	$(RUN) python -m tests.cpu_burner $(MAKE) --no-print-directory $(TIERS)

# The unit and integration tiers with the whole session's wall clock moved, ticking (tests/wall_clock.py): 400 days
# ahead, then from 30 s before a new year UTC (day and year boundaries: daily quotas, leases, TTLs, alert windows).
# A test that pins an instant an emulator later compares with the real clock fails here, not days after it lands.
# The e2e tier's sandboxes are other processes on the real clock, so it does not run this way.
WALL_CLOCKS ?= +400d new-year-30s
test-any-date: env ## the unit and integration tiers with the wall clock 400 days ahead, then 30 s before a new year
	@for clock in $(WALL_CLOCKS); do \
		echo "wall clock $$clock: unit and integration tiers"; \
		$(PYTEST) -n 2 --wall-clock=$$clock tests/unit tests/template -m "not build" && \
		$(PYTEST) -n 2 --wall-clock=$$clock tests/functions || exit 1; \
	done

build-local: ## sam build for this machine's architecture (what the e2e tier and RUNTIME=lambda run)
	@$(MAKE) --no-print-directory build ARCH=$(HOST_ARCH) BUILD_DIR=$(LOCAL_BUILD_DIR)

# McpLayer's cache key first (devstack/runtime/layer_cache_key.py): sam keys a cached layer on its folder only.
# The layers' .pyc come from any python3.13 found (none: they ship without); EXACT_PYTHON=1 (the deploy job)
# requires python DEPLOY_VERSION of devstack/runtime/interpreter.py, installed by the pinned uv when missing.
build: $(SAM) layer-requirements env ## sam build for arm64, no Docker (ARCH=x86_64 for an x86_64 host)
	@case "$(ARCH)" in arm64|x86_64) ;; *) echo "ARCH must be arm64 or x86_64, not $(ARCH)" >&2; exit 2;; esac
	$(RUN) python -m devstack.runtime.layer_cache_key
	lambda_python="$$($(RUN) python -m devstack.runtime.interpreter $(if $(EXACT_PYTHON),--exact --install,2>/dev/null))" \
		|| [ -z "$(EXACT_PYTHON)" ] || exit 2; \
	LAMBDA_ARCHITECTURE=$(ARCH) LAMBDA_PYTHON="$$lambda_python" \
		$(SAM) build --template template.yaml --build-dir $(BUILD_DIR) --cached --cache-dir .aws-sam/cache-$(ARCH) \
		--parameter-overrides Architecture=$(ARCH)

deploy: build deploy-built ## sam build + sam deploy (ENV=default|prod from samconfig.toml)

# Deploys what `make build` left in $(BUILD_DIR): CI builds in a job without AWS credentials and deploys the
# artifact. Guided only for an environment samconfig.toml lacks, and only in a terminal.
# deploy_parameters.py preflight first refuses a stack name that is not stack-exclusive (StackNameShape,
# StackNameExclusive) and creates the stack's permissions boundary (deploy/permissions-boundary.yaml) when it
# is missing, then gives the environment's parameter_overrides with PermissionsBoundaryArn set: every refusal
# comes before anything of the stack is created, and the template's PermissionsBoundaryRequired rule refuses
# a deploy that skipped this.
deploy-built: $(SAM) ## sam deploy of what make build left in BUILD_DIR
	@if [ "$(ARCH)" = arm64 ] && find $(BUILD_DIR) -name '*-x86_64-linux-gnu.so' -print -quit | grep -q .; then \
		echo "$(BUILD_DIR) holds an x86_64 build (make build ARCH=x86_64): run 'make build' before deploying" >&2; \
		exit 2; fi
	@if grep -q "^\[$(ENV).deploy.parameters\]" samconfig.toml; then \
		overrides=$$($(SAM_PYTHON) deploy/deploy_parameters.py preflight $(ENV)) || exit 2; \
		$(SAM) deploy --config-env $(ENV) $(SAM_DEPLOY_FLAGS) --parameter-overrides "$$overrides"; \
	elif [ -t 0 ]; then \
		$(SAM) deploy --guided --config-env $(ENV); \
	else \
		echo "samconfig.toml has no [$(ENV).deploy.parameters]: run 'make deploy ENV=$(ENV)' once in a terminal (guided) and commit samconfig.toml" >&2; \
		exit 1; \
	fi

# The live stack ENV against the template (deploy/verify_deployed.py): role trust policies, resource policies,
# Function URL auth types, key, queue and bucket policies, and no role under /<stack>/ the stack does not own.
# It reads the expanded template `make expanded` writes (the deploy job's build artifact carries it).
verify-deployed: $(SAM) ## ENV=default|prod: fail on any access the live stack grants that the template does not
	@[ -f build/expanded-template.json ] || $(MAKE) --no-print-directory expanded
	$(SAM_PYTHON) deploy/verify_deployed.py $(ENV) build/expanded-template.json

invoke: env ## FUNCTION=<LogicalId> EVENT=events/<function>/<file>.json [RUNTIME=lambda] [FRESH=1]
	$(RUN) python -m devstack.invoke $(if $(filter file,$(origin RUNTIME)),,--runtime $(RUNTIME)) \
		--build-dir $(BUILD_DIR) $(if $(FRESH),--fresh) \
		$(FUNCTION) $(EVENT)

# The running `make dev` stack's value of every variable the template declares, for `sam local invoke --env-vars`.
env-json: env ## the running make dev stack's --env-vars file for sam local invoke
	$(RUN) python -m devstack env-json $(if $(OUT),--output $(OUT))

# DURABLE=1: the durable worker on, for datasets of 1 KiB or more (DurableJobMinBytes' least), so a small upload
# runs as a durable job (docs/job-pipeline.md, "Durable jobs").
dev: env ## the whole template on 127.0.0.1 (PORT, STATE, FRESH=1, RUNTIME=lambda, AUTH=oauth|both|builtin, TRACING=off, CONFORMANCE=1, DURABLE=1)
	$(RUN) python -m devstack dev --port $(PORT) $(if $(STATE),--state $(STATE)) $(if $(FRESH),--fresh) \
		$(if $(CONFORMANCE),--conformance-fixtures) \
		--runtime $(RUNTIME) --build-dir $(BUILD_DIR) \
		$(if $(filter builtin,$(AUTH)),--parameter AuthMode=oauth --parameter AuthorizationServerMode=builtin,$(if $(AUTH),--parameter AuthMode=$(AUTH))) \
		$(if $(TRACING),--parameter Tracing=$(TRACING)) \
		$(if $(DURABLE),--parameter DurableWorker=Enabled --parameter DurableJobMinBytes=1024)

# make dev writes its spans to .devstack/traces.jsonl (in-process runtime; TRACING=off: none).
trace: env ## ID=<trace id> or JOB=<job id>: a trace of make dev as a tree with durations
	@$(RUN) python -m devstack trace $(ID) $(if $(JOB),--job $(JOB))

fire: env ## SCHEDULE=<LogicalId>: fire a schedule of the running stack now
	$(RUN) python -m devstack fire $(SCHEDULE)

token: env ## an OAuth access token from the running stack (SCOPE=...)
	@$(RUN) python -m devstack token $(if $(SCOPE),--scope "$(SCOPE)")
# The job DLQ back to JobQueue (SQS StartMessageMoveTask), its jobs PENDING again: STACK=<name> on AWS, else
# the running `make dev` stack; DRY_RUN=1 lists what would move.
redrive: env ## [DRY_RUN=1] [STACK=<name>]: the job DLQ back to JobQueue
ifdef STACK
	PYTHONPATH=layers/shared $(RUN) python -m mcp_backend.jobs.redrive --stack $(STACK) $(if $(DRY_RUN),--dry-run)
else
	$(RUN) python -m devstack redrive $(if $(DRY_RUN),--dry-run)
endif

# build too: the functions section reports ToolWorker's layer size in the arm64 deploy build (what deploys).
bench: env build build-local ## benchmarks into docs/benchmarks.md (BENCH='section ...')
	DEVSTACK_BUILD_DIR=$(LOCAL_BUILD_DIR) $(RUN) python -m tests.bench $(BENCH)

# Counts each unit of work's AWS requests on the local stack and prices them from tests/cost/prices.toml; rewrites
# docs/cost.md and the counts tests/functions/test_cost_model.py checks, printing what moved.
cost: env ## AWS requests and $ per unit of work and idle per month, counted on the local stack, into docs/cost.md
	PYTHONPATH=layers/shared $(RUN) python -m tests.cost

# The deployed stack end to end (tools/list, one job to SUCCEEDED). URL: the McpServerUrl output; KEY: an API key
# (docs/deploy.md#first-deploy-checklist); DATASET: what to analyze (default: the endpoint's own /healthz); TRACE=1: also
# read that job's trace back from X-Ray (a stack with Tracing=xray; tests/deployed/trace_check.py). Never part of make test.
smoke: env ## URL=<McpServerUrl> KEY=<API key> [TRACE=1]: the deployed stack end to end
	@if [ -z "$(URL)" ] || [ -z "$(KEY)" ]; then \
		echo "usage: make smoke URL=<McpServerUrl output> KEY=<API key> [DATASET=s3://... | https://...] [TRACE=1]" >&2; exit 2; fi
	@MCP_SMOKE_URL="$(URL)" MCP_SMOKE_KEY="$(KEY)" MCP_SMOKE_DATASET="$(DATASET)" MCP_SMOKE_TRACE="$(TRACE)" \
		$(RUN) pytest -q -p no:cacheprovider tests/deployed

# The smoke check's own environment, only from its hashed requirement file: no pytest, no plugins.
$(SMOKE_PYTHON): $(SMOKE_REQUIREMENTS)
	rm -rf $(TOOLS)/smoke && $(PYTHON) -m venv $(TOOLS)/smoke
	$(TOOLS)/smoke/bin/pip install $(PIP_HASHED) -r $(SMOKE_REQUIREMENTS)
	@touch $@

smoke-env: $(SMOKE_PYTHON) ## the smoke check's minimal environment (.tools/smoke), from tests/deployed/requirements.txt

# The deployed stack ENV (samconfig.toml) end to end with a key created for this run and revoked after it,
# pass or fail (tests/deployed/key_session.py), run in the minimal environment above (it holds the deploy role's
# credentials). deploy.yml runs it after every deploy; a failure fails the run. It installs nothing (run
# `make smoke-env` first, before any AWS credentials exist).
smoke-deployed: ## ENV=default|prod: the deployed stack end to end with a throwaway key
	@[ -x $(SMOKE_PYTHON) ] || { echo "run 'make smoke-env' first (before any AWS credentials exist)" >&2; exit 2; }
	PYTHONPATH=layers/shared:. $(SMOKE_PYTHON) -m tests.deployed.key_session $(ENV)

# Deletes the stack ENV (sam asks first). What the stack keeps is listed, with the commands that remove it on
# purpose: the tables and the key secret are DeletionPolicy Retain (docs/deploy.md "Deleting everything"). A profile
# without a part (docs/deploy.md "Profiles") has no output for its stores: they are listed as none.
delete: $(SAM) ## ENV=default|prod: delete the stack and list what it keeps
	@grep -q "^\[$(ENV).global.parameters\]" samconfig.toml || { echo "samconfig.toml has no [$(ENV)]" >&2; exit 2; }
	@stack=$$(sed -n '/^\[$(ENV).global.parameters\]/,/^\[/s/^stack_name = "\(.*\)"/\1/p' samconfig.toml); \
	outputs=$$($(SAM) list stack-outputs --stack-name "$$stack" --config-env $(ENV) --output json) || exit 1; \
	value() { echo "$$outputs" | $(SAM_PYTHON) -c 'import json,sys; print(next((o["OutputValue"] for o in json.load(sys.stdin) if o["OutputKey"] == sys.argv[1]), "(none: its part is off)"))' "$$1"; }; \
	jobs=$$(value JobTableName) monitor=$$(value MonitorTableName) keys=$$(value ApiKeysSecretArn) \
		tokens=$$(value EndpointTokenKeyId) grants=$$(value AuthorizationTableName); \
	$(SAM) delete --stack-name "$$stack" --config-env $(ENV) || exit 1; \
	echo "Deleted $$stack. It keeps, on purpose (DeletionPolicy Retain), until you remove them:"; \
	echo "  JobTable        $$jobs      aws dynamodb delete-table --table-name $$jobs"; \
	echo "  MonitorTable    $$monitor      aws dynamodb delete-table --table-name $$monitor"; \
	echo "  ApiKeysSecret   $$keys"; \
	echo "                  aws secretsmanager delete-secret --secret-id $$keys --recovery-window-in-days 7"; \
	echo "  The secret's name ($$stack/api-keys) stays taken until it is gone: to deploy $$stack again at once,"; \
	echo "  delete it with --force-delete-without-recovery instead (its keys are lost)."; \
	echo "  EndpointTokenKey $$tokens (MonitorTable's endpoint tokens are sealed with it: delete the table first)"; \
	echo "                  aws kms schedule-key-deletion --key-id $$tokens --pending-window-in-days 7"; \
	echo "  AuthorizationTable $$grants (AuthorizationServerMode builtin: its clients and grants)"; \
	echo "                  aws dynamodb delete-table --table-name $$grants"

clean: ## remove builds, environments and caches
	rm -rf .aws-sam build .venv .pytest_cache .ruff_cache
