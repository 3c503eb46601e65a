#!/bin/bash
# AuthorizationServer entry: the Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap) runs this script,
# waits for $AWS_LWA_READINESS_CHECK_PATH on $PORT, then hands each Function URL request to it. All logic is in
# the shared layer (mcp_backend.authorization); the layer goes first on the module path, as for McpServer.
export PYTHONPATH="${LAMBDA_TASK_ROOT}:/opt/python${PYTHONPATH:+:${PYTHONPATH}}"
exec python3 -m uvicorn --factory mcp_backend.authorization.app:create_app \
  --host 127.0.0.1 --port "${PORT:-8080}" --no-access-log --no-server-header --timeout-graceful-shutdown 1
