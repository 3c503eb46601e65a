// The official MCP Tasks requester (@modelcontextprotocol/ext-tasks) against the endpoint at argv[2].
// Usage: node client.mjs <mcp url> <api key> <settle|cancel> <dataset url>
// The session port is this host's transport (the package's ConnectedMcpSessionPort): one POST per request,
// framed for 2026-07-28 with the Tasks extension in the request's client capabilities. Which Tasks
// generation to speak is read from the server's server/discover capabilities, as the SDK adapter does.
// Prints one JSON line per event on stdout.
import { withTasks } from "@modelcontextprotocol/ext-tasks/client";

const [url, apiKey, mode, datasetUrl] = process.argv.slice(2);
const TASKS = "io.modelcontextprotocol/tasks";
const PROTOCOL = "2026-07-28";
let nextId = 1;

function emit(event) {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

async function post(request) {
  const params = request.params ?? {};
  const body = {
    ...request,
    jsonrpc: "2.0",
    id: request.id ?? nextId++,
    params: {
      ...params,
      _meta: {
        ...(params._meta ?? {}),
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientInfo": { name: "ext-tasks-e2e", version: "1.0.0" },
        "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS]: {} } },
      },
    },
  };
  const headers = {
    authorization: `Bearer ${apiKey}`,
    accept: "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": PROTOCOL,
    "mcp-method": body.method,
  };
  const name = body.params.name ?? body.params.taskId;
  if (typeof name === "string") headers["mcp-name"] = name;
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await response.text();
  let message;
  if ((response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    message = text
      .split("\n")
      .filter((line) => line.startsWith("data: "))
      .map((line) => JSON.parse(line.slice(6)))
      .find((candidate) => candidate.id === body.id);
  } else {
    message = JSON.parse(text);
  }
  if (message === undefined) throw new Error(`no answer to ${body.method} (HTTP ${response.status})`);
  return message.error ? { kind: "error", error: message.error } : { kind: "result", result: message.result };
}

const discovered = await post({ method: "server/discover", params: {} });
const advertised = discovered.kind === "result" && discovered.result.capabilities?.extensions?.[TASKS] !== undefined;
emit({ event: "discovered", tasks: advertised });

const port = {
  endpointId: url,
  taskCapabilities: advertised ? { generation: "v2", capabilities: {} } : { generation: "none" },
  invalidated: false,
  dispatch: (request) => post(request),
  onServerRequest: () => () => {},
  onNotification: () => () => {},
  onInvalidated: () => () => {},
};
const session = withTasks(port);
const execution = await session.callTool("analyze_dataset", { dataset_url: datasetUrl });
const taskId = execution.handle?.taskId;
emit({ event: "called", kind: execution.kind, taskId });

if (mode === "cancel") {
  await execution.cancel();
  const polled = await post({ method: "tasks/get", params: { taskId } });
  emit({ event: "cancelled", status: polled.result?.status });
} else {
  const { outcome } = await execution.settle();
  emit({ event: "settled", status: outcome.status, result: outcome.result ?? null, error: outcome.error?.message });
}
await session.close?.();
