// Reads a JSON array of simulations (iam-simulate's Simulation shape) on stdin; writes, in order, each one's
// decision (Allowed, ExplicitlyDenied, ImplicitlyDenied, or Error) and the context keys it ignored.
import { runSimulation } from '@cloud-copilot/iam-simulate'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const simulations = JSON.parse(Buffer.concat(chunks).toString('utf8'))
const decisions = []
for (const simulation of simulations) {
  const response = await runSimulation(simulation, {})
  if (response.resultType === 'error') {
    decisions.push({ decision: 'Error', error: response.errors.message, details: response.errors })
  } else {
    const results = response.resultType === 'single' ? [response.result] : response.results
    decisions.push({
      decision: response.overallResult,
      ignoredContextKeys: [...new Set(results.flatMap((r) => r.ignoredContextKeys ?? []))]
    })
  }
}
process.stdout.write(JSON.stringify(decisions))
