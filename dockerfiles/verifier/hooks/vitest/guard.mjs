// The verifier's guard of vitest's assertion API (vitest 1 to 4), a setup file of the verifier's
// that joins each project's own (the reporter adds it, last) and runs before every test file, in
// the worker that runs it. vitest shares its `expect` with the code under test, in the same
// realm: `expect.extend` can override a built-in matcher (and a forged matcher passes). So the
// matchers as they stand once the repository's setup files have run are recorded, with the
// intrinsics the comparison needs captured now, and every test that ends on a replaced one fails
// with an error saying so (and a tamper record goes to the verifier's collector).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(import.meta.url);
const { write } = require('../node/evidence.cjs');
// The project's own vitest (this file lives outside the project): the instance its tests import.
const root = (globalThis.__vitest_worker__ && globalThis.__vitest_worker__.config
  && globalThis.__vitest_worker__.config.root) || process.cwd();
const manifest = createRequire(`${root}/`).resolve('vitest/package.json');
const exported = (JSON.parse(readFileSync(manifest, 'utf8')).exports || {})['.'] || {};
const entry = typeof exported === 'string' ? exported
  : (exported.import && (exported.import.default || exported.import)) || exported.default;
const vitest = await import(pathToFileURL(join(dirname(manifest), entry)).href);
const { afterEach, chai, expect } = vitest;

const describe = Object.getOwnPropertyDescriptor;
const names = Object.getOwnPropertyNames;
const MATCHERS = Symbol.for('matchers-object');
const proto = chai.Assertion.prototype;
const recorded = new Map(names(proto).map((name) => [name, describe(proto, name)]));
const object = globalThis[MATCHERS];
const custom = object && object.matchers ? { ...object.matchers } : null;
const same = (a, b) => a && b && a.value === b.value && a.get === b.get && a.set === b.set;
let said = false;

afterEach(() => {
  const replaced = [];
  for (const [name, was] of recorded) {
    if (!same(describe(proto, name), was)) replaced.push(`the matcher ${name}`);
  }
  if (custom) {
    const now = globalThis[MATCHERS];
    for (const [name, matcher] of Object.entries(custom)) {
      if (!now || !now.matchers || now.matchers[name] !== matcher) replaced.push(`the matcher ${name}`);
    }
  }
  if (globalThis.expect !== undefined && globalThis.expect !== expect && recorded.size) {
    replaced.push('the global expect');
  }
  if (!replaced.length) return;
  const what = replaced.slice(0, 5).join(', ');
  if (!said) {
    said = true;
    write('vitest', { t: 'tamper', what: `vitest's assertion API was replaced: ${what}` });
  }
  throw new Error(`selfbench: vitest's assertion API was replaced while the tests ran: ${what}`);
});
