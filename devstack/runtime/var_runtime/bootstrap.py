"""/var/runtime/bootstrap.py of the local Lambda runtime: the module search path the Lambda docs give
for Python (the function's code, then the layers' /opt/python/lib/pythonX.Y/site-packages and
/opt/python, then the runtime's libraries), then AWS's Runtime Interface Client with _HANDLER.
https://docs.aws.amazon.com/lambda/latest/dg/python-package.html (dependency search path)
https://docs.aws.amazon.com/lambda/latest/dg/packaging-layers.html (layer paths for Python)
"""

import os
import sys

version = f"{sys.version_info.major}.{sys.version_info.minor}"
for path in reversed([os.environ["LAMBDA_TASK_ROOT"], f"/opt/python/lib/python{version}/site-packages", "/opt/python"]):
    sys.path.insert(0, path)

from awslambdaric import __main__ as runtime_interface_client  # noqa: E402 - after the search path is set

runtime_interface_client.main([sys.argv[0], os.environ["_HANDLER"]])
