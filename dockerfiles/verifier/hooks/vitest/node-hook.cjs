'use strict';
// vitest's hook in the verifier's node preload (hooks/node/preload.cjs): vitest's CLI reads
// process.argv; add the verifier's reporter (reporter.mjs), and vitest's default unless the
// command names reporters itself.
module.exports = function vitestHook(kit) {
  if (/\/vitest\/vitest\.m?js$/.test(kit.main) && kit.claim('vitest')) {
    if (!kit.hasOption(process.argv, '--reporter')) process.argv.push('--reporter=default');
    process.argv.push(`--reporter=${__dirname}/reporter.mjs`);
  }
  return null;
};
