'use strict';
// Loaded into every node process of a verifier test run (the `node` the tests find on PATH adds
// `--require` of this file; NODE_OPTIONS carries it for a node started by its full path). It
// does nothing outside a run. It opens the process's session, then lets each runner's hook
// (`hooks/<runner>/node-hook.cjs`, one folder per runner: jest's and vitest's add the verifier's
// reporter next to their own, mocha's records its test events) see the command line and every
// module as it loads: per-test evidence, from outside /app.
if (process.env.SELFBENCH_EVIDENCE_SOCKET && !globalThis.__selfbenchPreload && !process.versions.bun) {
  globalThis.__selfbenchPreload = true;
  const fs = require('fs');
  const path = require('path');
  const Module = require('module');
  const { write, relative, absolute } = require('./evidence.cjs');
  // This process's session, on its first connection, opened before any code of the repository
  // runs; its end is node's exit (process.exit included; not a kill, an abort or a crash).
  write('node', { t: 'start', argv: process.argv.slice(0, 8) });
  process.on('exit', (code) => write('node', { t: 'finish', status: code }));

  // The outermost test runner of the verifier's run records; a run its tests start (jest's and
  // vitest's own end-to-end tests start the CLI again) does not.
  const OWNER = 'SELFBENCH_EVIDENCE_OWNER';
  const claim = (runner) => {
    const held = process.env[OWNER];
    if (held && held !== `${runner}:${process.pid}`) return false;
    process.env[OWNER] = `${runner}:${process.pid}`;
    return true;
  };
  let main = '';
  try {
    main = fs.realpathSync(process.argv[1] || '');
  } catch (error) {
    main = '';
  }
  const kit = {
    write,
    relative,
    absolute,
    claim,
    main,
    hasOption: (argv, name) => argv.some((a) => a === name || a.startsWith(`${name}=`)),
  };

  // Each runner's hook, in the order of its folder's name; the folders are root's and read-only
  // to the tests. A hook that fails to load leaves its runner without evidence (the run fails).
  const root = path.dirname(__dirname);
  const loaders = [];
  for (const name of fs.readdirSync(root).sort()) {
    const file = path.join(root, name, 'node-hook.cjs');
    if (!fs.existsSync(file)) continue;
    try {
      const hook = require(file)(kit);
      if (hook && typeof hook.load === 'function') loaders.push(hook.load);
    } catch (error) {
      // Never let one runner's hook break another's, or the process.
    }
  }

  if (loaders.length) {
    const load = Module._load;
    Module._load = function (request, parent, isMain) {
      let exported = load.apply(this, arguments);
      const resolve = () => Module._resolveFilename(request, parent, isMain);
      for (const hook of loaders) {
        try {
          exported = hook(request, exported, resolve);
        } catch (error) {
          // Never let the verifier's hook break a require.
        }
      }
      return exported;
    };
  }
}
