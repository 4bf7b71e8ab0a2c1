"""Node projects shaped like real pull requests: jest and vitest with node_modules; mocha; a
pnpm project whose tests run under `node --experimental-strip-types --test` (TypeScript, a test
that starts an HTTP server); a bun project."""

from __future__ import annotations

import json
from pathlib import Path

from tests.realistic.project import Project, shaped, steps

NODE_OPTIONS = ["--build-network", "host", "--toolchain-source", "node=registry"]

# ---- jest and vitest with node_modules --------------------------------------------------------


def _package(runner: str, version: str, script: str) -> str:
    return (
        json.dumps(
            {
                "name": "strutil",
                "private": True,
                "scripts": {"test": script},
                "devDependencies": {runner: version},
            },
            indent=2,
        )
        + "\n"
    )


def _node_project(name: str, runner: str, version: str, command: str, esm: bool) -> Project:
    """`esm`: the tests import (vitest 3 refuses require()); else they require (jest)."""
    header = "import { test, expect } from 'vitest';\n" if esm else ""

    def load(names: str, module: str) -> str:
        if esm:
            return f"import {{ {names} }} from '{module}/index.js';\n"
        return f"const {{ {names} }} = require('{module}');\n"

    return Project(
        name=name,
        base={
            "package.json": _package(runner, version, command.replace(" {tests}", "")),
            ".gitignore": "node_modules/\ncoverage/\n",
            "src/pad.js": "exports.padLeft = (s, n) => String(s).padStart(n);\n",
            "src/index.js": "module.exports = { ...require('./pad') };\n",
            "test/pad.test.js": header
            + load("padLeft", "../src")
            + "test('pads', () => expect(padLeft('a', 3)).toBe('  a'));\n",
        },
        tests={
            "test/repeat.test.js": header
            + load("repeat", "../src")
            + "test('repeats', () => expect(repeat('ab', 3)).toBe('ababab'));\n"
            "test('zero', () => { expect(repeat('x', 0)).toBe(''); "
            "expect(repeat('x', 1)).toEqual('x'); });\n"
        },
        gold={
            "src/repeat.js": steps(20, "//")
            + "exports.repeat = (s, n) => Array(n).fill(s).join('');\n",
            "src/index.js": "module.exports = { ...require('./pad'), ...require('./repeat') };\n",
        },
        broken_gold={
            "src/repeat.js": steps(20, "//") + "exports.repeat = (s, n) => s;\n",
            "src/index.js": "module.exports = { ...require('./pad'), ...require('./repeat') };\n",
        },
        failing={
            "test/env.test.js": f"{header}test('env', () => expect(process.env.SELFBENCH_NO_SUCH)"
            ".toBe('set'));\n"
        },
        failing_selector="test/env.test.js",
        overrides={
            "setupCommand": "npm install --no-audit --no-fund --loglevel=error",
            "testCommand": command,
            "failToPass": ["test/repeat.test.js"],
            "passToPass": ["test/pad.test.js"],
            "testPaths": ["test/repeat.test.js"],
            "toolchains": ["node"],
            "resources": {"memoryMb": 1024},
        },
        options=["--build-network", "host", "--toolchain-source", "node=registry"],
        runners=(runner,),
    )


JEST = _node_project("real-jest", "jest", "29.7.0", "npx jest {tests}", esm=False)
VITEST = _node_project("real-vitest", "vitest", "3.2.7", "npx vitest run {tests}", esm=True)


DATA = Path(__file__).resolve().parents[1] / "data" / "realistic"

# ---- mocha, its lockfile installed with npm ci -------------------------------------------------

_MOCHA_PACKAGE = (
    json.dumps(
        {
            "name": "intervals",
            "private": True,
            "scripts": {"test": "mocha"},
            "devDependencies": {"mocha": "10.8.2"},
        },
        indent=2,
    )
    + "\n"
)
_OVERLAP = "exports.overlaps = (a, b) => a[0] < b[1] && b[0] < a[1];\n"
MOCHA = Project(
    name="real-mocha",
    base={
        "package.json": _MOCHA_PACKAGE,
        "package-lock.json": (DATA / "mocha-package-lock.json").read_text(),
        ".gitignore": "node_modules/\n",
        ".mocharc.json": '{ "timeout": 5000, "recursive": false }\n',
        "lib/overlap.js": _OVERLAP,
        "test/overlap.spec.js": "const assert = require('node:assert/strict');\n"
        "const { overlaps } = require('../lib/overlap');\n\n"
        "describe('overlaps', () => {\n  it('sees an overlap', () => "
        "assert.equal(overlaps([1, 3], [2, 4]), true));\n});\n",
    },
    tests={
        "test/merge.spec.js": "const assert = require('node:assert/strict');\n"
        "const { merge } = require('../lib/merge');\n\n"
        "describe('merge', () => {\n"
        "  it('joins overlapping intervals', () => "
        "assert.deepEqual(merge([[1, 3], [2, 6], [8, 9]]), [[1, 6], [8, 9]]));\n"
        "  it('keeps an empty list', () => assert.deepEqual(merge([]), []));\n});\n"
    },
    gold={
        "lib/merge.js": steps(20, "//") + "exports.merge = (list) => {\n  const out = [];\n"
        "  for (const [a, b] of [...list].sort((x, y) => x[0] - y[0])) {\n"
        "    const last = out[out.length - 1];\n"
        "    if (last && a <= last[1]) last[1] = Math.max(last[1], b);\n"
        "    else out.push([a, b]);\n  }\n  return out;\n};\n"
    },
    broken_gold={"lib/merge.js": steps(20, "//") + "exports.merge = (list) => list;\n"},
    failing={
        "test/env.spec.js": "const assert = require('node:assert/strict');\n\n"
        "describe('env', () => { it('is set', () => "
        "assert.ok(process.env.SELFBENCH_NO_SUCH)); });\n"
    },
    failing_selector="test/env.spec.js",
    overrides={
        "setupCommand": "npm ci --no-audit --no-fund --loglevel=error",
        "testCommand": "npx mocha {tests}",
        "failToPass": ["test/merge.spec.js"],
        "passToPass": ["test/overlap.spec.js"],
        "testPaths": ["test/merge.spec.js"],
        "toolchains": ["node"],
        "resources": {"memoryMb": 1024},
    },
    options=NODE_OPTIONS,
    # mocha exits with the number of tests that failed, its canaries' among them.
    broken="fail-to-pass tests still fail with the gold patch (exit ",
    runners=("mocha",),
)

# ---- node --test under pnpm: TypeScript by type stripping, a test that starts a server ---------

_KV_PACKAGE = (
    json.dumps(
        {
            "name": "kvstore",
            "private": True,
            "type": "module",
            "packageManager": "pnpm@9.15.9",
            "scripts": {"test": "node --experimental-strip-types --test"},
            "dependencies": {"is-number": "7.0.0"},
        },
        indent=2,
    )
    + "\n"
)
_STORE = (
    "import isNumber from 'is-number';\n\n"
    "export class Store {\n  #data = new Map<string, string>();\n"
    "  set(key: string, value: string): void { this.#data.set(key, value); }\n"
    "  get(key: string): string | undefined { return this.#data.get(key); }\n"
    "  count(): number { return this.#data.size; }\n"
    "  numeric(key: string): boolean { return isNumber(this.#data.get(key) ?? ''); }\n}\n"
)
_SERVER = (
    "import type { IncomingMessage, ServerResponse } from 'node:http';\n"
    "import { Store } from './store.ts';\n\n"
    "export function handler(store: Store) {\n"
    "  return (request: IncomingMessage, response: ServerResponse) => {\n"
    "    const url = new URL(request.url ?? '/', 'http://localhost');\n"
    "    if (url.pathname === '/set') store.set(url.searchParams.get('k') ?? '', "
    "url.searchParams.get('v') ?? '');\n"
    "    response.end(String(store.count()));\n  };\n}\n"
)
_SERVER_TEST = (
    "import { test } from 'node:test';\nimport assert from 'node:assert/strict';\n"
    "import { createServer } from 'node:http';\nimport type { AddressInfo } from 'node:net';\n"
    "import { Store } from '../src/store.ts';\nimport { handler } from '../src/server.ts';\n\n"
    "test('counts what it stores over HTTP', async () => {\n"
    "  const server = createServer(handler(new Store()));\n"
    "  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));\n"
    "  const { port } = server.address() as AddressInfo;\n"
    "  try {\n"
    "    const reply = await fetch(`http://127.0.0.1:${port}/set?k=a&v=1`);\n"
    "    assert.equal(await reply.text(), '1');\n"
    "  } finally {\n    server.close();\n  }\n});\n"
)
_TTL_TEST = (
    "import { test, describe } from 'node:test';\nimport assert from 'node:assert/strict';\n"
    "import { Expiring } from '../src/ttl.ts';\n\n"
    "describe('Expiring', () => {\n"
    "  test('keeps a fresh value', () => {\n"
    "    const store = new Expiring(() => 0);\n    store.set('a', '1', 10);\n"
    "    assert.equal(store.get('a'), '1');\n  });\n"
    "  test('drops a stale value', () => {\n    let now = 0;\n"
    "    const store = new Expiring(() => now);\n    store.set('a', '1', 10);\n    now = 11;\n"
    "    assert.equal(store.get('a'), undefined);\n  });\n});\n"
)
_TTL_HEAD = (
    "import { Store } from './store.ts';\n\n"
    "export class Expiring {\n  #store = new Store();\n  #until = new Map<string, number>();\n"
    "  readonly now: () => number;\n"
    "  constructor(now: () => number) {\n    this.now = now;\n  }\n"
)
NODE_TEST = Project(
    name="real-node-test",
    base={
        "package.json": _KV_PACKAGE,
        "pnpm-lock.yaml": (DATA / "kvstore-pnpm-lock.yaml").read_text(),
        ".gitignore": "node_modules/\n",
        "src/store.ts": _STORE,
        "src/server.ts": _SERVER,
        "test/server.test.ts": _SERVER_TEST,
        "test/store.test.ts": "import { test } from 'node:test';\n"
        "import assert from 'node:assert/strict';\nimport { Store } from '../src/store.ts';\n\n"
        "test('stores', () => {\n  const store = new Store();\n  store.set('n', '42');\n"
        "  assert.equal(store.get('n'), '42');\n  assert.equal(store.numeric('n'), true);\n});\n",
    },
    tests={"test/ttl.test.ts": _TTL_TEST},
    gold={
        "src/ttl.ts": _TTL_HEAD
        + steps(20, "  //")
        + "  set(key: string, value: string, seconds: number): void {\n"
        "    this.#store.set(key, value);\n    this.#until.set(key, this.now() + seconds);\n  }\n"
        "  get(key: string): string | undefined {\n"
        "    return this.now() <= (this.#until.get(key) ?? -1) ? this.#store.get(key) : "
        "undefined;\n  }\n}\n"
    },
    broken_gold={
        "src/ttl.ts": _TTL_HEAD
        + steps(20, "  //")
        + "  set(key: string, value: string, seconds: number): void { "
        "this.#store.set(key, value); }\n"
        "  get(key: string): string | undefined { return this.#store.get(key); }\n}\n"
    },
    failing={
        "test/env.test.ts": "import { test } from 'node:test';\n"
        "import assert from 'node:assert/strict';\n\n"
        "test('env', () => assert.ok(process.env.SELFBENCH_NO_SUCH));\n"
    },
    failing_selector="test/env.test.ts",
    overrides={
        # Corepack fetches the pnpm of packageManager; the registry mirror here serves no
        # signing keys, so corepack's signature check is off (COREPACK_INTEGRITY_KEYS=0).
        "setupCommand": "COREPACK_INTEGRITY_KEYS=0 pnpm install --frozen-lockfile",
        "testCommand": "node --experimental-strip-types --test {tests}",
        "failToPass": ["test/ttl.test.ts"],
        "passToPass": ["test/store.test.ts", "test/server.test.ts"],
        "testPaths": ["test/ttl.test.ts"],
        "toolchains": ["node"],
        "resources": {"memoryMb": 1024},
    },
    options=NODE_OPTIONS,
    runners=("node-test",),
)

# ---- bun ---------------------------------------------------------------------------------------

_BUN_PACKAGE = (
    json.dumps({"name": "colors", "private": True, "type": "module", "devDependencies": {}}) + "\n"
)
BUN = Project(
    name="real-bun",
    base={
        "package.json": _BUN_PACKAGE,
        ".gitignore": "node_modules/\n",
        "src/hex.ts": "export const toHex = (n: number): string => "
        "n.toString(16).padStart(2, '0');\n",
        "test/hex.test.ts": "import { test, expect } from 'bun:test';\n"
        "import { toHex } from '../src/hex.ts';\n\n"
        "test('pads', () => expect(toHex(10)).toBe('0a'));\n",
    },
    tests={
        "test/rgb.test.ts": "import { test, expect, describe } from 'bun:test';\n"
        "import { rgb } from '../src/rgb.ts';\n\n"
        "describe('rgb', () => {\n"
        "  test('white', () => expect(rgb(255, 255, 255)).toBe('#ffffff'));\n"
        "  test('clamps', () => expect(rgb(300, -1, 16)).toBe('#ff0010'));\n});\n"
    },
    gold={
        "src/rgb.ts": "import { toHex } from './hex.ts';\n\n"
        + steps(20, "//")
        + "const clamp = (n: number) => Math.min(255, Math.max(0, Math.round(n)));\n"
        "export const rgb = (r: number, g: number, b: number): string =>\n"
        "  '#' + [r, g, b].map((n) => toHex(clamp(n))).join('');\n"
    },
    broken_gold={
        "src/rgb.ts": "import { toHex } from './hex.ts';\n\n"
        + steps(20, "//")
        + "export const rgb = (r: number, g: number, b: number): string =>\n"
        "  '#' + [r, g, b].map(toHex).join('');\n"
    },
    failing={
        "test/env.test.ts": "import { test, expect } from 'bun:test';\n\n"
        "test('env', () => expect(process.env.SELFBENCH_NO_SUCH).toBe('set'));\n"
    },
    failing_selector="test/env.test.ts",
    overrides={
        "setupCommand": "bun install",
        "testCommand": "bun test {tests}",
        "failToPass": ["test/rgb.test.ts"],
        "passToPass": ["test/hex.test.ts"],
        "testPaths": ["test/rgb.test.ts"],
        "toolchains": ["bun"],
        "resources": {"memoryMb": 1024},
    },
    options=NODE_OPTIONS,
    runners=("bun",),
)


# What test_real_projects.py runs of this family (tests/realistic/python.py says how).
PROJECTS = (
    shaped(JEST, "jest", forged=True),
    shaped(VITEST, "vitest", proves=True, forged=True),
    shaped(MOCHA, "mocha", proves=True),
    shaped(NODE_TEST, "node-test-pnpm", proves=True),
    shaped(BUN, "bun", proves=True),
)
MANIFEST_PROJECTS: tuple[Project, ...] = ()
