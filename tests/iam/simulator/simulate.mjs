// Reads a JSON array of simulations (iam-simulate's Simulation shape) on stdin; writes, in order, each one's
// decision (Allowed, ExplicitlyDenied, ImplicitlyDenied, or Error) and the context keys it ignored.
//
// runSimulation checks each request context key against the action's documented keys, and its matcher knows
// variable keys only in the form prefix/name (aws:ResourceTag/<key>): KMS's kms:EncryptionContext:<key> is
// never recognised, so it is dropped and every condition on it sees the key missing. When the encryption
// context is all it dropped, the request (already validated: action, resource type, policies) is evaluated
// again by runUnsafeSimulation, which takes the context as given; `encryptionContext` says so. (That path loads
// the resource policy without a name, which its analysis needs: the policy is handed over already named.)
import { createValidatedPolicy } from '@cloud-copilot/iam-policy'
import { runSimulation, runUnsafeSimulation } from '@cloud-copilot/iam-simulate'

const ENCRYPTION_CONTEXT = /^kms:encryptioncontext:./i

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const simulations = JSON.parse(Buffer.concat(chunks).toString('utf8'))
const decisions = []
for (const simulation of simulations) {
  const response = await runSimulation(simulation, {})
  if (response.resultType === 'error') {
    decisions.push({ decision: 'Error', error: response.errors.message, details: response.errors })
    continue
  }
  const results = response.resultType === 'single' ? [response.result] : response.results
  const ignored = [...new Set(results.flatMap((r) => r.ignoredContextKeys ?? []))]
  const context = ignored.filter((key) => ENCRYPTION_CONTEXT.test(key))
  if (response.resultType === 'single' && context.length > 0 && context.length === ignored.length) {
    const resourcePolicy = simulation.resourcePolicy
      ? createValidatedPolicy(simulation.resourcePolicy, () => [], { name: 'resource' })
      : undefined
    decisions.push({
      decision: runUnsafeSimulation({ ...simulation, resourcePolicy }, {}),
      ignoredContextKeys: [],
      encryptionContext: context
    })
  } else {
    decisions.push({ decision: response.overallResult, ignoredContextKeys: ignored })
  }
}
process.stdout.write(JSON.stringify(decisions))
