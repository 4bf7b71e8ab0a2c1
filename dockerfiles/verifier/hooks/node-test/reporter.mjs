// The verifier's reporter for `node --test`: one record per test with its outcome, and the run's
// end, sent to the verifier's collector from the test runner's own process. Suites are left out
// (their tests are the evidence); a file that failed as a whole is kept.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { write, relative, absolute } = require('../node/evidence.cjs');

export default async function* selfbenchReporter(source) {
  const stacks = new Map();
  let failed = false;
  write('node-test', { t: 'start', version: process.version });
  for await (const event of source) {
    const data = event.data || {};
    const file = data.file || '';
    if (event.type === 'test:start') {
      const stack = stacks.get(file) || [];
      stack.length = data.nesting || 0;
      stack.push(data.name);
      stacks.set(file, stack);
      continue;
    }
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const details = data.details || {};
    const stack = (stacks.get(file) || []).slice(0, data.nesting || 0);
    const isSuite = details.type === 'suite';
    // A suite that failed only because tests in it failed: those report it themselves (a
    // canary in a describe block fails its suite so, with every held-out test passing).
    if (isSuite && details.error && details.error.failureType === 'subtestsFailed') continue;
    let outcome = event.type === 'test:pass' ? 'passed' : 'failed';
    if (data.skip !== undefined || data.todo !== undefined) outcome = 'skipped';
    if (outcome === 'failed') failed = true;
    if (isSuite && outcome !== 'failed') continue;
    const names = [...stack, data.name];
    write('node-test', {
      t: 'test',
      id: `${relative(file)} > ${names.join(' > ')}`,
      file: absolute(file),
      outcome: isSuite ? 'error' : outcome,
    });
  }
  write('node-test', { t: 'finish', status: failed ? 1 : 0 });
  yield '';
}
