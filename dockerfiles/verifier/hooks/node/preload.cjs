'use strict';
// Loaded into every node process of a verifier test run (the `node` the tests find on PATH adds
// `--require` of this file; NODE_OPTIONS carries it for a node started by its full path). It
// does nothing outside a run. It makes jest and vitest load the verifier's reporter next to
// their own, and records mocha's test events: per-test evidence, from outside /app.
if (process.env.SELFBENCH_EVIDENCE_SOCKET && !globalThis.__selfbenchPreload && !process.versions.bun) {
  globalThis.__selfbenchPreload = true;
  const fs = require('fs');
  const Module = require('module');
  const hooks = __dirname;
  const { write, relative, absolute } = require('./evidence.cjs');
  // This process's session, on its first connection, opened before any code of the repository
  // runs; its end is node's exit (process.exit included; not a kill, an abort or a crash).
  write('node', { t: 'start', argv: process.argv.slice(0, 8) });
  process.on('exit', (code) => write('node', { t: 'finish', status: code }));

  const hasOption = (argv, name) => argv.some((a) => a === name || a.startsWith(`${name}=`));
  // The outermost test runner of the verifier's run records; a run its tests start (jest's and
  // vitest's own end-to-end tests start the CLI again) does not.
  const OWNER = 'SELFBENCH_EVIDENCE_OWNER';
  const claim = (runner) => {
    const held = process.env[OWNER];
    if (held && held !== `${runner}:${process.pid}`) return false;
    process.env[OWNER] = `${runner}:${process.pid}`;
    return true;
  };

  // vitest: its CLI reads process.argv; add the reporter (and vitest's default, unless the
  // command names reporters itself).
  let main = '';
  try {
    main = fs.realpathSync(process.argv[1] || '');
  } catch (error) {
    main = '';
  }
  if (/\/vitest\/vitest\.m?js$/.test(main) && claim('vitest')) {
    if (!hasOption(process.argv, '--reporter')) process.argv.push('--reporter=default');
    process.argv.push(`--reporter=${hooks}/vitest-reporter.mjs`);
  }

  function jestArgv(argv) {
    const out = [...argv];
    if (!hasOption(out, '--reporters')) out.push('--reporters=default');
    out.push(`--reporters=${hooks}/jest-reporter.cjs`);
    return out;
  }

  function wrapJestCli(exported) {
    const original = exported.run;
    const run = function (maybeArgv, project) {
      if (!claim('jest')) return original.call(this, maybeArgv, project);
      const argv = jestArgv(Array.isArray(maybeArgv) ? maybeArgv : process.argv.slice(2));
      return original.call(this, argv, project);
    };
    const descriptor = Object.getOwnPropertyDescriptor(exported, 'run');
    if (descriptor && 'value' in descriptor && descriptor.writable) {
      exported.run = run;
      return exported;
    }
    if (descriptor && !descriptor.configurable && 'value' in descriptor) return exported;
    return new Proxy(exported, {
      get(target, property, receiver) {
        return property === 'run' ? run : Reflect.get(target, property, receiver);
      },
    });
  }

  function record(runner, test, outcome) {
    const title = typeof test.fullTitle === 'function' ? test.fullTitle() : String(test.title);
    write(runner, {
      t: 'test',
      id: `${relative(test.file)} > ${title}`,
      file: absolute(test.file),
      outcome,
    });
  }

  let mochaRunner = null;
  function attachMocha(runner) {
    if (runner.__selfbench || mochaRunner || !claim('mocha')) return;
    runner.__selfbench = true;
    mochaRunner = runner;
    write('mocha', { t: 'start' });
    runner.on('pass', (test) => record('mocha', test, 'passed'));
    runner.on('pending', (test) => record('mocha', test, 'skipped'));
    runner.on('fail', (test) => record('mocha', test, test.type === 'hook' ? 'error' : 'failed'));
    runner.on('end', () =>
      write('mocha', { t: 'finish', status: runner.failures ? 1 : 0 }),
    );
  }

  function patchMochaRunner(Runner) {
    if (!Runner || !Runner.prototype || Runner.prototype.__selfbenchPatched) return;
    const run = Runner.prototype.run;
    if (typeof run !== 'function') return;
    Runner.prototype.run = function (...args) {
      attachMocha(this);
      return run.apply(this, args);
    };
    Runner.prototype.__selfbenchPatched = true;
  }

  const load = Module._load;
  let jestWrapped = false;
  let guard = null;
  Module._load = function (request, parent, isMain) {
    const exported = load.apply(this, arguments);
    try {
      if (typeof request === 'string' && request.includes('jest-circus')) {
        const file = Module._resolveFilename(request, parent, isMain);
        // SELFBENCH_GUARDS=off: the runner's test mode with the in-process checks off.
        if (/[\\/]jest-circus[\\/]runner\.js$/.test(file) && process.env.SELFBENCH_GUARDS !== 'off') {
          guard = guard || require('./jest-guard.cjs');
          if (typeof exported === 'function') return guard.wrap(exported);
          if (exported && typeof exported.default === 'function') {
            return { ...exported, default: guard.wrap(exported.default) };
          }
        }
      }
      if (
        !jestWrapped &&
        exported &&
        typeof exported.run === 'function' &&
        typeof exported.buildArgv === 'function' &&
        !('runCLI' in exported)
      ) {
        const file = Module._resolveFilename(request, parent, isMain);
        if (/[\\/]jest-cli[\\/]/.test(file)) {
          jestWrapped = true;
          return wrapJestCli(exported);
        }
      }
      if (
        typeof exported === 'function' &&
        exported.constants &&
        exported.constants.EVENT_RUN_BEGIN &&
        exported.prototype &&
        typeof exported.prototype.run === 'function'
      ) {
        const file = Module._resolveFilename(request, parent, isMain);
        if (/[\\/]mocha[\\/]lib[\\/]/.test(file)) patchMochaRunner(exported);
      }
    } catch (error) {
      // Never let the verifier's hook break a require.
    }
    return exported;
  };
}
