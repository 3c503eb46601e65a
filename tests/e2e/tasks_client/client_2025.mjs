// The TypeScript SDK 1.x client (@modelcontextprotocol/sdk, protocol 2025-11-25) calling a tool as a task
// with its experimental tasks API, as clients built on it (VS Code's Copilot Chat among them) do.
// Usage: node client_2025.mjs <mcp url> <api key> <settle|cancel> <dataset url>
// Prints one JSON line per event on stdout.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, apiKey, mode, datasetUrl] = process.argv.slice(2);

function emit(event) {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

const client = new Client({ name: "sdk1-tasks-e2e", version: "1.0.0" }, { defaultTaskPollInterval: 100 });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { authorization: `Bearer ${apiKey}` } },
});
await client.connect(transport);
emit({
  event: "initialized",
  protocolVersion: transport.protocolVersion ?? null,
  tasks: client.getServerCapabilities()?.tasks ?? null,
});

// The listing tells the SDK which tools take a task (execution.taskSupport).
const { tools } = await client.listTools();
const tool = tools.find((candidate) => candidate.name === "analyze_dataset");
emit({ event: "listed", taskSupport: tool?.execution?.taskSupport ?? null });

const stream = client.experimental.tasks.callToolStream({
  name: "analyze_dataset",
  arguments: { dataset_url: datasetUrl },
});
const statuses = [];
for await (const message of stream) {
  if (message.type === "taskCreated") {
    emit({ event: "called", kind: "task", taskId: message.task.taskId, status: message.task.status });
    if (mode === "cancel") {
      const cancelled = await client.experimental.tasks.cancelTask(message.task.taskId);
      const polled = await client.experimental.tasks.getTask(message.task.taskId);
      emit({ event: "cancelled", status: cancelled.status, polled: polled.status });
    }
  } else if (message.type === "taskStatus") {
    statuses.push(message.task.status);
  } else if (message.type === "result") {
    emit({ event: "settled", status: "completed", statuses, result: message.result });
  } else if (message.type === "error") {
    emit({ event: "settled", status: "error", statuses, error: message.error.message });
  }
}
await client.close();
