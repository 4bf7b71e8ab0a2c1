'use strict';
// The verifier's guard of jest's test API (jest-circus, jest 27 to 30), in the process that runs
// the tests (a worker, or jest itself in band). jest shares its API with the code under test:
// `expect.extend` can override a built-in matcher (and a forged matcher counts as a passing
// assertion), the matchers object and the global `test`/`it`/`expect` can be replaced, and a
// test's function can be swapped in the circus state. So, from outside the test's VM context:
// - after the repository's own setup files have run, and before the test file loads, the
//   globals jest installed and every matcher are recorded;
// - each test's function is recorded when the test is defined;
// - at each test's start and end, every one of them must be the same object: a test that ran
//   on a replaced API fails with an error saying what was replaced, and a tamper record goes to
//   the verifier's collector.
const path = require('path');
const { write } = require('../node/evidence.cjs');

const GUARD = path.join(__dirname, 'guard.cjs');
const MATCHERS = Symbol.for('$$jest-matchers-object');

function guardOf(environment, config) {
  const seen = { globals: null, matchers: null, matchersObject: null, object: null };
  const defined = new WeakMap(); // test -> the function it was defined with
  const earlier = new WeakMap(); // test -> what was replaced when it started
  let said = false;

  function snapshot() {
    const global = environment.global;
    const names = ['expect', 'test', 'it', 'describe', 'beforeEach', 'afterEach', 'beforeAll',
      'afterAll', 'fit', 'xit', 'xtest', 'fdescribe', 'xdescribe'];
    seen.globals = config.injectGlobals === false ? null
      : Object.fromEntries(names.map((name) => [name, global[name]]));
    const object = global[MATCHERS];
    seen.object = object || null;
    seen.matchersObject = object ? object.matchers : null;
    seen.matchers = object ? { ...object.matchers } : null;
  }

  function replaced() {
    const global = environment.global;
    const found = [];
    if (seen.globals) {
      for (const [name, value] of Object.entries(seen.globals)) {
        if (global[name] !== value) found.push(`the global ${name}`);
      }
    }
    if (seen.matchers) {
      const object = global[MATCHERS];
      if (object !== seen.object || !object || object.matchers !== seen.matchersObject) {
        found.push("expect's matchers object");
      } else {
        for (const [name, matcher] of Object.entries(seen.matchers)) {
          if (object.matchers[name] !== matcher) found.push(`the matcher ${name}`);
        }
      }
    }
    return found;
  }

  function fail(test, what) {
    const error = new Error(`selfbench: jest's test API was replaced while the tests ran: ${what}`);
    if (test && Array.isArray(test.errors)) test.errors.push([error, error]);
    if (!said) {
      said = true;
      write('jest', { t: 'tamper', what: `jest's test API was replaced: ${what}` });
    }
  }

  function onEvent(event, state) {
    if (event.name === 'add_test' && state && state.currentDescribeBlock) {
      const children = state.currentDescribeBlock.children || [];
      const test = children[children.length - 1];
      if (test && test.type === 'test') defined.set(test, event.fn);
      return;
    }
    if (event.name !== 'test_start' && event.name !== 'test_done' && event.name !== 'test_fn_start') {
      return;
    }
    const test = event.test;
    const what = seen.globals || seen.matchers ? replaced() : [];
    if (test && defined.has(test) && test.fn !== defined.get(test)) {
      what.push(`the function of the test "${test.name}"`);
    }
    if (!test) return;
    // What was replaced when the test started counts at its end, even if it was put back.
    const all = [...new Set([...(earlier.get(test) || []), ...what])];
    if (event.name === 'test_done') {
      if (all.length) fail(test, all.slice(0, 5).join(', '));
    } else if (all.length) {
      earlier.set(test, all);
    }
  }

  return { snapshot, onEvent };
}

// wrap(adapter): jest-circus's adapter, guarded.
function wrap(adapter) {
  if (typeof adapter !== 'function' || adapter.__selfbench) return adapter;
  const guarded = function (globalConfig, config, environment, runtime, testPath, send) {
    try {
      const guard = guardOf(environment, config);
      const own = environment.handleTestEvent;
      environment.handleTestEvent = function (event, state) {
        guard.onEvent(event, state);
        return own ? own.call(this, event, state) : undefined;
      };
      // The guard's entry joins the repository's setup files, last: the adapter asks the runtime
      // for it after theirs and before the test file; the runtime never loads it.
      const requireModule = runtime.requireModule;
      runtime.requireModule = function (from, ...rest) {
        if (from === GUARD && rest.length === 0) {
          guard.snapshot();
          return {};
        }
        return requireModule.call(this, from, ...rest);
      };
      const setup = Array.isArray(config.setupFilesAfterEnv) ? config.setupFilesAfterEnv : [];
      config = { ...config, setupFilesAfterEnv: [...setup, GUARD] };
    } catch (error) {
      write('jest', { t: 'tamper', what: `the verifier could not guard jest: ${error}` });
    }
    return adapter.call(this, globalConfig, config, environment, runtime, testPath, send);
  };
  guarded.__selfbench = true;
  return guarded;
}

module.exports = { wrap, GUARD };
