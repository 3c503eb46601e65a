"""MCP Apps views (`io.modelcontextprotocol/ui`, SEP-1865): `ui://` HTML resources a host renders in a sandboxed
iframe (ChatGPT's apps, Claude). Served as `text/html;profile=mcp-app` (the SDK's `mcp.server.apps.APP_MIME_TYPE`)
with `_meta.ui.csp` declaring no outside origin: the views fetch nothing and load nothing.

- `ui://analysis/result.html`: the view analyze_dataset's `_meta.ui.resourceUri` names. The host sends it the
  tool's result (`ui/notifications/tool-result`); it shows it as text (`textContent`, never markup).
- `ui://jobs/{jobId}/result.html`: one finished job of the caller's, rendered here. Every job value is escaped
  (`html.escape`): a job id, an error or a result string is text, never markup.

Spec: https://github.com/modelcontextprotocol/ext-apps (specification/2026-01-26/apps.mdx).
"""

from __future__ import annotations

import html
import json
from typing import Any

from mcp_backend.jobs.errors import InvalidCursor, JobNotFound
from mcp_backend.tools.context import ToolContext

# The extension's identifier and MIME type, as the SDK's `mcp.server.apps` names them (tests compare the two).
EXTENSION_ID = "io.modelcontextprotocol/ui"
APP_MIME_TYPE = "text/html;profile=mcp-app"
ANALYSIS_VIEW_URI = "ui://analysis/result.html"
JOB_VIEW_URI = "ui://jobs/{jobId}/result.html"
# Empty lists: no network connections and no outside scripts, styles or images (the spec's secure default, made
# explicit); prefersBorder so hosts frame the view alike.
UI_META: dict[str, Any] = {"ui": {"csp": {"connectDomains": [], "resourceDomains": []}, "prefersBorder": True}}

_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:12px}"
    "pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:8px}"
    "dt{font-weight:600}"
)

ANALYSIS_VIEW = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Dataset analysis</title><style>{_STYLE}</style></head>
<body><h1>Dataset analysis</h1><pre id="result">Waiting for the result...</pre>
<script>
// The host posts the tool's result (MCP Apps ui/notifications/tool-result); shown as text only.
window.addEventListener("message", function (event) {{
  var message = event.data;
  if (!message || message.method !== "ui/notifications/tool-result" || !message.params) return;
  var result = message.params.structuredContent || message.params;
  document.getElementById("result").textContent = JSON.stringify(result, null, 2);
}});
</script></body></html>
"""


def job_view(job: dict[str, Any]) -> str:
    """One job as an HTML page: status, tool, times, error and result, each escaped."""
    rows = "".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(str(job[key]))}</dd>"
        for label, key in (("Job", "jobId"), ("Status", "status"), ("Tool", "tool"), ("Finished", "completedAt"))
        if job.get(key) is not None
    )
    error = job.get("error")
    if isinstance(error, dict):
        text = f"{error.get('type', 'JobFailed')}: {error.get('message', '')}"
        rows += f"<dt>Error</dt><dd>{html.escape(text)}</dd>"
    if "result" in job:
        body = json.dumps(job["result"], indent=2, ensure_ascii=False, default=str)
    elif "resultChunk" in job:
        body = f"The result is {job.get('resultChars')} bytes: read it from job://{job['jobId']}/result."
    else:
        body = "No result yet."
    title = html.escape(f"Job {job['jobId']}")
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{_STYLE}</style></head>\n<body><h1>{title}</h1><dl>{rows}</dl>"
        f"<pre>{html.escape(body)}</pre></body></html>\n"
    )


def read_job_view(job_id: str, ctx: ToolContext) -> str | None:
    """The caller's job as a page; None when it is not theirs (or not a job at all)."""
    try:
        return job_view(ctx.job_service().page(ctx.user_id, job_id))
    except (JobNotFound, InvalidCursor):
        return None
