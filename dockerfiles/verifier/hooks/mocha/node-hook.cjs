'use strict';
// mocha's hook in the verifier's node preload (hooks/node/preload.cjs): mocha has no reporter
// to add beside the command's own, so its Runner's test events are recorded as mocha loads it.
module.exports = function mochaHook(kit) {
  // mocha's Runner as it loaded, before any test file: a Runner whose methods were replaced
  // since (its `fail` made to emit 'pass', its `emit` rewritten) reports what the code under
  // test wants; the first record after that is a tamper record instead.
  const METHODS = ['fail', 'emit', 'run', 'runTests', 'runTest', 'hook', 'hooks', 'hookUp',
    'hookDown', 'abort', 'checkGlobals', 'runAsync'];
  let saved = null;
  let said = false;
  function replaced(runner) {
    if (!saved) return null;
    return METHODS.find((name) => runner[name] !== saved[name]) || null;
  }

  function record(test, outcome) {
    const changed = replaced(attached);
    if (changed) {
      if (!said) kit.write('mocha', { t: 'tamper', what: `mocha's Runner.${changed} was replaced while the tests ran` });
      said = true;
      return;
    }
    const title = typeof test.fullTitle === 'function' ? test.fullTitle() : String(test.title);
    kit.write('mocha', {
      t: 'test',
      id: `${kit.relative(test.file)} > ${title}`,
      file: kit.absolute(test.file),
      outcome,
    });
  }

  let attached = null;
  function attach(runner) {
    if (runner.__selfbench || attached || !kit.claim('mocha')) return;
    runner.__selfbench = true;
    attached = runner;
    kit.write('mocha', { t: 'start' });
    runner.on('pass', (test) => record(test, 'passed'));
    runner.on('pending', (test) => record(test, 'skipped'));
    runner.on('fail', (test) => record(test, test.type === 'hook' ? 'error' : 'failed'));
    runner.on('end', () => kit.write('mocha', { t: 'finish', status: runner.failures ? 1 : 0 }));
  }

  function patchRunner(Runner) {
    if (!Runner || !Runner.prototype || Runner.prototype.__selfbenchPatched) return;
    const run = Runner.prototype.run;
    if (typeof run !== 'function') return;
    saved = Object.fromEntries(METHODS.map((name) => [name, Runner.prototype[name]]));
    Runner.prototype.run = function (...args) {
      attach(this);
      return run.apply(this, args);
    };
    Runner.prototype.__selfbenchPatched = true;
    saved.run = Runner.prototype.run;
  }

  function load(request, exported, resolve) {
    if (
      typeof exported === 'function' &&
      exported.constants &&
      exported.constants.EVENT_RUN_BEGIN &&
      exported.prototype &&
      typeof exported.prototype.run === 'function' &&
      /[\\/]mocha[\\/]lib[\\/]/.test(resolve())
    ) {
      patchRunner(exported);
    }
    return exported;
  }
  return { load };
};
