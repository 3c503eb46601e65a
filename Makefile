# One entry point for developers and CI. Needs only Python 3.11+ and the package registries:
# uv is bootstrapped into .tools/, the test environment comes from uv.lock, and aws-sam-cli
# (which pins its own boto3) and checkov live in isolated uv tool environments.
SHELL := /bin/bash
PYTHON ?= python3
TOOLS := $(CURDIR)/.tools
UV := $(TOOLS)/bin/uv
SAM := $(TOOLS)/bin/sam
CHECKOV := $(TOOLS)/bin/checkov
UV_VERSION := 0.13.8
SAM_CLI_VERSION := 1.170.0
CHECKOV_VERSION := 3.3.30
RUN := $(UV) run --frozen --no-sync
export UV_TOOL_DIR := $(TOOLS)/uv-tools
export UV_TOOL_BIN_DIR := $(TOOLS)/bin
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

.PHONY: help env lint test unit browser build build-local deploy deploy-built sam-cli smoke invoke env-json dev fire token redrive bench layer-requirements expanded clean

help:
	@echo "make test     lint + all tests (creates the environment from uv.lock)"
	@echo "make build    sam build (no Docker, no python3.13 needed)"
	@echo "make deploy   sam build + deploy (ENV=default|prod, from samconfig.toml; guided for an environment it lacks)"
	@echo "make dev      the whole template on 127.0.0.1 (PORT=4566, STATE=<dir> keeps data, FRESH=1,"
	@echo "              RUNTIME=lambda runs the build output as Lambda does: make build ARCH=$(HOST_ARCH) first)"
	@echo "make invoke   FUNCTION=<LogicalId> EVENT=events/<function>/<file>.json [RUNTIME=lambda] [FRESH=1]"
	@echo "make env-json the running make dev stack's --env-vars file for sam local invoke (.devstack/sam-env.json)"
	@echo "make fire     SCHEDULE=<LogicalId>: fire a schedule of the running stack now"
	@echo "make redrive  [DRY_RUN=1] [STACK=<name>]: job DLQ back to JobQueue (the running local stack by default)"
	@echo "make smoke    URL=<McpServerUrl> KEY=<API key>: the deployed stack end to end"
	@echo "make bench    benchmarks -> docs/benchmarks.md"
	@echo "make browser  headless Chromium for the browser test (installed only in CI, from apt)"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(SAM): | $(UV)
	$(UV) tool install --quiet aws-sam-cli==$(SAM_CLI_VERSION)

sam-cli: $(SAM)

$(CHECKOV): | $(UV)
	$(UV) tool install --quiet checkov==$(CHECKOV_VERSION)

env: $(UV)
	$(UV) sync --frozen --quiet

# The core layer: the project's dependencies. The MCP layer: the mcp-layer group without what the core layer
# already ships (both are on the functions that have the MCP layer).
layer-requirements: $(UV)
	$(UV) export --frozen --no-default-groups --no-hashes --no-header --no-emit-project \
		$(addprefix --no-emit-package ,$(RUNTIME_PROVIDED)) --output-file $(LAYER_REQUIREMENTS) --quiet
	$(UV) export --frozen --only-group mcp-layer --no-hashes --no-header --no-emit-project \
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
	$(RUN) cfn-lint -- deploy/github-oidc-role.yaml
	$(SAM) validate --lint --template template.yaml --region us-east-1
	$(CHECKOV) --config-file .checkov.yaml --file template.yaml --file build/expanded-template.json \
		--file deploy/github-oidc-role.yaml

# The end-to-end suite runs the product's functions in the Lambda runtime: the host-architecture build
# in Lambda-shaped sandboxes, through AWS's Runtime Interface Client (README "The local stack").
unit: env build-local
	DEVSTACK_RUNTIME=lambda DEVSTACK_BUILD_DIR=$(LOCAL_BUILD_DIR) $(RUN) pytest -q

test: lint build browser unit

# Headless Chromium for the browser client test (tests/e2e/test_mcp_browser.py). In CI (CI=true) it is installed
# from the distribution's packages when missing and apt-get is there (as root, or with passwordless sudo);
# elsewhere nothing is installed and the test skips, naming what it needs.
BROWSERS := chromium chromium-browser google-chrome google-chrome-stable
browser:
	@for name in $(BROWSERS); do if command -v $$name >/dev/null 2>&1; then exit 0; fi; done; \
	if [ "$${CI:-}" = true ] && command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends chromium; \
	fi

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
deploy-built: $(SAM)
	@if [ "$(ARCH)" = arm64 ] && find $(BUILD_DIR) -name '*-x86_64-linux-gnu.so' -print -quit | grep -q .; then \
		echo "$(BUILD_DIR) holds an x86_64 build (make build ARCH=x86_64): run 'make build' before deploying" >&2; \
		exit 2; fi
	@if grep -q "^\[$(ENV).deploy.parameters\]" samconfig.toml; then \
		$(SAM) deploy --config-env $(ENV) $(SAM_DEPLOY_FLAGS); \
	elif [ -t 0 ]; then \
		$(SAM) deploy --guided --config-env $(ENV); \
	else \
		echo "samconfig.toml has no [$(ENV).deploy.parameters]: run 'make deploy ENV=$(ENV)' once in a terminal (guided) and commit samconfig.toml" >&2; \
		exit 1; \
	fi

invoke: env
	$(RUN) python -m devstack.invoke --runtime $(RUNTIME) --build-dir $(BUILD_DIR) $(if $(FRESH),--fresh) \
		$(FUNCTION) $(EVENT)

# The running `make dev` stack's value of every variable the template declares, for `sam local invoke --env-vars`.
env-json: env
	$(RUN) python -m devstack env-json $(if $(OUT),--output $(OUT))

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

clean:
	rm -rf .aws-sam build .venv .pytest_cache .ruff_cache
