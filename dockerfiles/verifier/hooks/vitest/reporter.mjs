// The verifier's vitest reporter (vitest 1 to 4): one line per test with its outcome, a line for
// a test file that failed to run or an unhandled error, and the run's end.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const { write, relative, absolute } = require('../node/evidence.cjs');

const STATES = { pass: 'passed', fail: 'failed', skip: 'skipped', todo: 'skipped' };

function walk(task, names, file, out) {
  for (const child of task.tasks || []) {
    const path = [...names, child.name];
    if (child.type === 'suite') {
      walk(child, path, file, out);
      if (child.result && child.result.state === 'fail' && !(child.tasks || []).length) {
        out.push({ id: `${file} > ${path.join(' > ')}`, outcome: 'error' });
      }
      continue;
    }
    let state = child.result ? child.result.state : undefined;
    if (!state || state === 'run' || state === 'queued') {
      state = child.mode === 'skip' || child.mode === 'todo' ? 'skip' : undefined;
    }
    out.push({ id: `${file} > ${path.join(' > ')}`, outcome: STATES[state] || 'error' });
  }
}

export default class SelfbenchVitestReporter {
  constructor() {
    this.done = false;
  }

  onInit(ctx) {
    write('vitest', { t: 'start' });
    // The guard of vitest's assertion API joins every project's setup files, last.
    const guard = fileURLToPath(new URL('./guard.mjs', import.meta.url));
    const configs = [ctx && ctx.config, ...((ctx && ctx.projects) || []).map((p) => p && p.config)];
    for (const config of process.env.SELFBENCH_GUARDS === 'off' ? [] : configs) {
      if (config && Array.isArray(config.setupFiles) && !config.setupFiles.includes(guard)) {
        config.setupFiles.push(guard);
      }
    }
  }

  record(files, errors) {
    if (this.done) return;
    this.done = true;
    let failed = false;
    for (const task of files || []) {
      const file = relative(task.filepath);
      const out = [];
      walk(task, [], file, out);
      const failedToRun =
        task.result && task.result.state === 'fail' && !out.some((t) => t.outcome === 'failed');
      if (failedToRun) out.push({ id: `${file} > [the test file failed to run]`, outcome: 'error' });
      for (const test of out) {
        if (test.outcome === 'failed' || test.outcome === 'error') failed = true;
        write('vitest', { t: 'test', file: absolute(task.filepath), ...test });
      }
    }
    if (errors && errors.length) {
      write('vitest', { t: 'test', id: '[unhandled errors]', outcome: 'error' });
    }
    // vitest's exit status: 1 once a test failed or an error went unhandled.
    write('vitest', { t: 'finish', status: failed || (errors && errors.length) ? 1 : 0 });
  }

  onTestRunEnd(testModules, errors) {
    this.record((testModules || []).map((module) => module.task).filter(Boolean), errors);
  }

  onFinished(files, errors) {
    this.record(files, errors);
  }
}
