'use strict';
// jest's hook in the verifier's node preload (hooks/node/preload.cjs): jest's CLI gets the
// verifier's reporter (reporter.cjs) next to the command's own, and jest-circus's adapter the
// guard of jest's test API (guard.cjs), as they load.
module.exports = function jestHook(kit) {
  const reporter = `${__dirname}/reporter.cjs`;

  function jestArgv(argv) {
    const out = [...argv];
    if (!kit.hasOption(out, '--reporters')) out.push('--reporters=default');
    out.push(`--reporters=${reporter}`);
    return out;
  }

  function wrapJestCli(exported) {
    const original = exported.run;
    const run = function (maybeArgv, project) {
      if (!kit.claim('jest')) return original.call(this, maybeArgv, project);
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

  let wrapped = false;
  let guard = null;
  function load(request, exported, resolve) {
    if (typeof request === 'string' && request.includes('jest-circus')) {
      // SELFBENCH_GUARDS=off: the runner's test mode with the in-process checks off.
      if (/[\\/]jest-circus[\\/]runner\.js$/.test(resolve()) && process.env.SELFBENCH_GUARDS !== 'off') {
        guard = guard || require('./guard.cjs');
        if (typeof exported === 'function') return guard.wrap(exported);
        if (exported && typeof exported.default === 'function') {
          return { ...exported, default: guard.wrap(exported.default) };
        }
      }
    }
    if (
      !wrapped &&
      exported &&
      typeof exported.run === 'function' &&
      typeof exported.buildArgv === 'function' &&
      !('runCLI' in exported) &&
      /[\\/]jest-cli[\\/]/.test(resolve())
    ) {
      wrapped = true;
      return wrapJestCli(exported);
    }
    return exported;
  }
  return { load };
};
