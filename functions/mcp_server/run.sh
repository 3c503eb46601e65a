#!/bin/bash
# McpServer entry: the Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap) runs this script, waits
# for $AWS_LWA_READINESS_CHECK_PATH on $PORT, then streams each Function URL request to it. All logic is
# in the shared layer. Under an exec wrapper the runtime's bootstrap never runs, so nothing puts the
# layer on the module path for us: Lambda sets PYTHONPATH to the runtime's own directory only. Put the
# layer first, in the order the python runtime uses (function code, then /opt/python).
export PYTHONPATH="${LAMBDA_TASK_ROOT}:/opt/python${PYTHONPATH:+:${PYTHONPATH}}"
exec python3 -m uvicorn --factory mcp_backend.mcp.server:create_app \
  --host 127.0.0.1 --port "${PORT:-8080}" --no-access-log --no-server-header --timeout-graceful-shutdown 1
