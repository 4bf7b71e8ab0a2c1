'use strict';
// The verifier's jest reporter (jest 24 to 30): one line per test with its outcome, a line for
// a test file that failed to run, and the run's end.
const { write, relative, absolute } = require('../node/evidence.cjs');

const OUTCOMES = {
  passed: 'passed',
  failed: 'failed',
  pending: 'skipped',
  skipped: 'skipped',
  disabled: 'skipped',
  todo: 'skipped',
  focused: 'passed',
};

class SelfbenchJestReporter {
  constructor() {
    this.files = new Set();
    write('jest', { t: 'start', version: safeVersion() });
  }

  onTestResult(test, result) {
    this.record(result);
  }

  onTestFileResult(test, result) {
    this.record(result);
  }

  record(result) {
    if (!result || this.files.has(result.testFilePath)) return;
    this.files.add(result.testFilePath);
    const file = relative(result.testFilePath);
    for (const assertion of result.testResults || []) {
      const names = [...(assertion.ancestorTitles || []), assertion.title];
      write('jest', {
        t: 'test',
        id: `${file} > ${names.join(' > ')}`,
        file: absolute(result.testFilePath),
        outcome: OUTCOMES[assertion.status] || 'failed',
        // How many expect() calls passed: a test that asserted at the oracle and passes with
        // none has had its assertions taken away.
        asserts: typeof assertion.numPassingAsserts === 'number' ? assertion.numPassingAsserts : undefined,
      });
    }
    const broken =
      result.testExecError ||
      (result.failureMessage && !(result.testResults || []).some((a) => a.status === 'failed'));
    if (broken) {
      write('jest', {
        t: 'test',
        id: `${file} > [the test file failed to run]`,
        file: absolute(result.testFilePath),
        outcome: 'error',
      });
    }
  }

  onRunComplete(contexts, results) {
    const failed = !results || results.numFailedTestSuites > 0 || results.numFailedTests > 0 ||
      results.numRuntimeErrorTestSuites > 0;
    write('jest', { t: 'finish', status: failed ? 1 : 0 });
  }

  getLastError() {
    return undefined;
  }
}

function safeVersion() {
  try {
    return require(require.resolve('jest/package.json', { paths: [process.cwd()] })).version;
  } catch (error) {
    return undefined;
  }
}

module.exports = SelfbenchJestReporter;
