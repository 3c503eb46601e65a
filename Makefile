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
FUNCTION ?= ToolWorker
PORT ?= 4566
RUNTIME ?= inprocess
EVENT ?= events/tool_worker/healthy-batch.json
# The layer ships everything the lock pins except what the Lambda runtime provides.
RUNTIME_PROVIDED := boto3 botocore s3transfer python-dateutil six urllib3

.PHONY: help env lint test unit build build-local deploy deploy-built sam-cli smoke smoke-deployed delete invoke dev \
	fire token redrive bench layer-requirements tool-requirements expanded clean

help:
	@echo "make test     lint + all tests (creates the environment from uv.lock)"
	@echo "make build    sam build (no Docker, no python3.13 needed)"
	@echo "make deploy   sam build + deploy (ENV=default|prod, from samconfig.toml; guided for an environment it lacks)"
	@echo "make dev      the whole template on 127.0.0.1 (PORT=4566, STATE=<dir> keeps data, FRESH=1,"
	@echo "              RUNTIME=lambda runs the build output as Lambda does: make build ARCH=$(HOST_ARCH) first)"
	@echo "make invoke   FUNCTION=<LogicalId> EVENT=events/<function>/<file>.json"
	@echo "make fire     SCHEDULE=<LogicalId>: fire a schedule of the running stack now"
	@echo "make redrive  [DRY_RUN=1] [STACK=<name>]: job DLQ back to JobQueue (the running local stack by default)"
	@echo "make smoke    URL=<McpServerUrl> KEY=<API key>: the deployed stack end to end"
	@echo "make smoke-deployed ENV=default|prod: the same with a key created for the run and revoked after it"
	@echo "make delete   ENV=default|prod: delete the stack; lists what it keeps (tables, secret) and how to remove it"
	@echo "make bench    benchmarks -> docs/benchmarks.md"

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

sam-cli: $(SAM)

$(CHECKOV): tools/checkov/requirements.txt | $(UV)
	rm -rf $(TOOLS)/checkov && $(PYTHON) -m venv $(TOOLS)/checkov
	$(TOOLS)/checkov/bin/pip install $(PIP_HASHED) -r tools/checkov/requirements.txt
	ln -sf $(TOOLS)/checkov/bin/checkov $@

# Re-lock a tool after changing its pin in tools/<tool>/pyproject.toml (or to take its dependencies' fixes),
# and export every lock with hashes. A test holds each requirements.txt equal to its lock's export.
tool-requirements: $(UV)
	@for tool in $(TOOL_NAMES); do \
		$(UV) lock --quiet --project tools/$$tool && \
		$(UV) export --quiet --frozen --project tools/$$tool --no-emit-project --no-header \
			--output-file tools/$$tool/requirements.txt || exit 1; \
	done

env: $(UV)
	$(UV) sync --frozen --quiet

# The core layer: the project's dependencies. The MCP layer: the mcp-layer group without what the core layer
# already ships (both are on the functions that have the MCP layer).
layer-requirements: $(UV)
	$(UV) export --frozen --no-default-groups --no-header --no-emit-project \
		$(addprefix --no-emit-package ,$(RUNTIME_PROVIDED)) --output-file $(LAYER_REQUIREMENTS) --quiet
	$(UV) export --frozen --only-group mcp-layer --no-header --no-emit-project \
		$(addprefix --no-emit-package ,$(RUNTIME_PROVIDED)) \
		$$(sed -n 's/^\([A-Za-z0-9._-]*\)==.*/--no-emit-package \1/p' $(LAYER_REQUIREMENTS)) \
		--output-file $(MCP_LAYER_REQUIREMENTS) --quiet

build/expanded-template.json: template.yaml env
	$(RUN) python -m devstack.template $@

expanded: build/expanded-template.json

lint: env $(SAM) $(CHECKOV) build/expanded-template.json
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

# The end-to-end suite runs the product's functions in the Lambda runtime: the host-architecture build
# in Lambda-shaped sandboxes, through AWS's Runtime Interface Client (README "The local stack").
unit: env build-local
	DEVSTACK_RUNTIME=lambda DEVSTACK_BUILD_DIR=$(LOCAL_BUILD_DIR) $(RUN) pytest -q

test: lint build unit

build-local:
	@$(MAKE) --no-print-directory build ARCH=$(HOST_ARCH) BUILD_DIR=$(LOCAL_BUILD_DIR)

build: $(SAM) layer-requirements env
	@case "$(ARCH)" in arm64|x86_64) ;; *) echo "ARCH must be arm64 or x86_64, not $(ARCH)" >&2; exit 2;; esac
	LAMBDA_ARCHITECTURE=$(ARCH) LAMBDA_PYTHON="$$($(RUN) python -m devstack.interpreter 2>/dev/null)" \
		$(SAM) build --template template.yaml --build-dir $(BUILD_DIR) --cache-dir .aws-sam/cache-$(ARCH) \
		--parameter-overrides Architecture=$(ARCH)

deploy: build deploy-built

# Deploys what `make build` left in $(BUILD_DIR): CI builds in a job without AWS credentials and deploys the
# artifact. Guided only for an environment samconfig.toml lacks, and only in a terminal.
# The permissions boundary (the GitHub deploy role can create roles only with it): PERMISSIONS_BOUNDARY_ARN (CI
# sets it), else the one the deployed stack already has, so a terminal deploy never strips it. It is added to
# the environment's parameter_overrides after checking the policy exists: a wrong ARN stops here, before
# anything is created, instead of failing the first role halfway through the deploy.
deploy-built: $(SAM)
	@if [ "$(ARCH)" = arm64 ] && find $(BUILD_DIR) -name '*-x86_64-linux-gnu.so' -print -quit | grep -q .; then \
		echo "$(BUILD_DIR) holds an x86_64 build (make build ARCH=x86_64): run 'make build' before deploying" >&2; \
		exit 2; fi
	@if grep -q "^\[$(ENV).deploy.parameters\]" samconfig.toml; then \
		boundary=$$($(SAM_PYTHON) deploy/deploy_parameters.py boundary $(ENV) $(PERMISSIONS_BOUNDARY_ARN)) || exit 2; \
		if [ -n "$$boundary" ]; then \
			$(SAM_PYTHON) deploy/deploy_parameters.py check-boundary "$$boundary" || exit 2; \
			$(SAM) deploy --config-env $(ENV) $(SAM_DEPLOY_FLAGS) --parameter-overrides \
				"$$($(SAM_PYTHON) deploy/deploy_parameters.py overrides $(ENV) PermissionsBoundaryArn=$$boundary)"; \
		else \
			$(SAM) deploy --config-env $(ENV) $(SAM_DEPLOY_FLAGS); \
		fi; \
	elif [ -t 0 ]; then \
		$(SAM) deploy --guided --config-env $(ENV); \
	else \
		echo "samconfig.toml has no [$(ENV).deploy.parameters]: run 'make deploy ENV=$(ENV)' once in a terminal (guided) and commit samconfig.toml" >&2; \
		exit 1; \
	fi

invoke: env
	$(RUN) python -m devstack.invoke $(FUNCTION) $(EVENT)

dev: env
	$(RUN) python -m devstack dev --port $(PORT) $(if $(STATE),--state $(STATE)) $(if $(FRESH),--fresh) \
		--runtime $(RUNTIME) --build-dir $(BUILD_DIR) $(if $(AUTH),--parameter AuthMode=$(AUTH))

fire: env
	$(RUN) python -m devstack fire $(SCHEDULE)

token: env
	@$(RUN) python -m devstack token $(if $(SCOPE),--scope "$(SCOPE)")
# The job DLQ back to JobQueue (SQS StartMessageMoveTask), its jobs PENDING again: STACK=<name> on AWS, else
# the running `make dev` stack; DRY_RUN=1 lists what would move.
redrive: env
ifdef STACK
	PYTHONPATH=layers/shared $(RUN) python -m mcp_backend.jobs.redrive --stack $(STACK) $(if $(DRY_RUN),--dry-run)
else
	$(RUN) python -m devstack redrive $(if $(DRY_RUN),--dry-run)
endif

bench: env build-local
	DEVSTACK_BUILD_DIR=$(LOCAL_BUILD_DIR) $(RUN) python -m tests.bench $(BENCH)

# The deployed stack end to end (tools/list, one job to SUCCEEDED). URL: the McpServerUrl output; KEY: an API key
# (README "First deploy"); DATASET: what to analyze (default: the endpoint's own /healthz). Never part of make test.
smoke: env
	@if [ -z "$(URL)" ] || [ -z "$(KEY)" ]; then \
		echo "usage: make smoke URL=<McpServerUrl output> KEY=<API key> [DATASET=s3://... | https://...]" >&2; exit 2; fi
	@MCP_SMOKE_URL="$(URL)" MCP_SMOKE_KEY="$(KEY)" MCP_SMOKE_DATASET="$(DATASET)" \
		$(RUN) pytest -q -p no:cacheprovider tests/deployed

# The deployed stack ENV (samconfig.toml) end to end with a key created for this run and revoked after it,
# pass or fail (tests/deployed/key_session.py). deploy.yml runs it after every deploy; a failure fails the run.
# It installs nothing (run `make env` first): in CI it runs with AWS credentials, after every install.
smoke-deployed:
	@[ -x .venv/bin/python ] || { echo "run 'make env' first (before any AWS credentials exist)" >&2; exit 2; }
	PYTHONPATH=layers/shared $(RUN) python -m tests.deployed.key_session $(ENV)

# Deletes the stack ENV (sam asks first). What the stack keeps is listed, with the commands that remove it on
# purpose: the tables and the key secret are DeletionPolicy Retain (docs/deploy.md "Deleting everything").
delete: $(SAM)
	@grep -q "^\[$(ENV).global.parameters\]" samconfig.toml || { echo "samconfig.toml has no [$(ENV)]" >&2; exit 2; }
	@stack=$$(sed -n '/^\[$(ENV).global.parameters\]/,/^\[/s/^stack_name = "\(.*\)"/\1/p' samconfig.toml); \
	outputs=$$($(SAM) list stack-outputs --stack-name "$$stack" --config-env $(ENV) --output json) || exit 1; \
	value() { echo "$$outputs" | $(SAM_PYTHON) -c 'import json,sys; print(next(o["OutputValue"] for o in json.load(sys.stdin) if o["OutputKey"] == sys.argv[1]))' "$$1"; }; \
	jobs=$$(value JobTableName) monitor=$$(value MonitorTableName) keys=$$(value ApiKeysSecretArn); \
	$(SAM) delete --stack-name "$$stack" --config-env $(ENV) || exit 1; \
	echo "Deleted $$stack. It keeps, on purpose (DeletionPolicy Retain), until you remove them:"; \
	echo "  JobTable        $$jobs      aws dynamodb delete-table --table-name $$jobs"; \
	echo "  MonitorTable    $$monitor      aws dynamodb delete-table --table-name $$monitor"; \
	echo "  ApiKeysSecret   $$keys"; \
	echo "                  aws secretsmanager delete-secret --secret-id $$keys --recovery-window-in-days 7"; \
	echo "  The secret's name ($$stack/api-keys) stays taken until it is gone: to deploy $$stack again at once,"; \
	echo "  delete it with --force-delete-without-recovery instead (its keys are lost)."

clean:
	rm -rf .aws-sam build .venv .pytest_cache .ruff_cache
