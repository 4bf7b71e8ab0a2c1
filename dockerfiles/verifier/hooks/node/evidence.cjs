'use strict';
// The verifier's channel in a node process: records to the collector (root, outside the tests'
// reach) over a connection this process makes at start-up (the preload), each signed with the
// key the collector gave that connection. The key lives only in this module's closure; records
// written to the socket by other code are unsigned, and a connection made later holds no process
// session, on which alone a runner's session may open.
//
// net has no synchronous API: the connection and its key arrive asynchronously, records wait in
// a queue until then, and are written synchronously on the socket's descriptor afterwards, so
// that nothing is lost when the process exits right after (jest's process.exit).
const fs = require('fs');
const net = require('net');
const path = require('path');
const crypto = require('crypto');

const address = process.env.SELFBENCH_EVIDENCE_SOCKET || '';
// The verifier's recorder files: every file of the hooks folders (root's, read-only to the tests),
// this language kit's and each runner's (hooks/<runner>/).
const HOOKS = `${path.dirname(__dirname)}/`;
const ours = { has: (file) => file.startsWith(HOOKS) };
const state = { socket: null, fd: -1, key: null, queue: [], failed: false };

function flush() {
  while (state.queue.length && state.key && state.fd >= 0) {
    const line = state.queue.shift();
    const mac = crypto.createHmac('sha256', state.key).update(line).digest('hex');
    const data = Buffer.from(`${mac} ${line}\n`);
    let offset = 0;
    let spins = 0;
    while (offset < data.length) {
      try {
        offset += fs.writeSync(state.fd, data, offset);
      } catch (error) {
        // The descriptor is non-blocking: wait for the collector to read (it always does).
        if (error.code !== 'EAGAIN' || ++spins > 200000) {
          state.failed = true;
          return;
        }
      }
    }
  }
}

function connect() {
  if (state.socket || !address) return;
  const socket = net.createConnection({ path: `\0${address.replace(/^@/, '')}` });
  state.socket = socket;
  let buffer = '';
  socket.on('data', (chunk) => {
    if (state.key) return;
    buffer += chunk.toString('latin1');
    const end = buffer.indexOf('\n');
    if (end < 0) return;
    state.key = Buffer.from(buffer.slice(0, end).trim(), 'hex');
    state.fd = socket._handle && typeof socket._handle.fd === 'number' ? socket._handle.fd : -1;
    socket.pause();
    socket.unref();
    flush();
  });
  socket.on('error', () => {
    state.failed = true;
  });
}

// Past the verifier's own frames, the caller must be node's own code or an installed package:
// code under test driving the reporter gets a tamper record in place of its record. The stack is
// read through V8's call sites with this module's own handles on them (taken as node starts,
// before any code of the repository), at a depth of its own: code that shortens the stack
// (Error.stackTraceLimit), formats it (Error.prepareStackTrace) or pins either so that ours cannot
// be set leaves no caller to trust. Code compiled at run time (eval, new Function) is nobody's.
const NativeError = Error;
const captureStackTrace = Error.captureStackTrace;
const describe = Object.getOwnPropertyDescriptor;
const defineProperty = Object.defineProperty;
const DEPTH = 64;
const asSites = (_error, sites) => sites;
const UNREADABLE = { why: 'code that keeps the stack from being read' };

function callSites() {
  const limit = describe(NativeError, 'stackTraceLimit');
  const prepare = describe(NativeError, 'prepareStackTrace');
  const holder = {};
  try {
    defineProperty(NativeError, 'stackTraceLimit', {
      value: DEPTH, writable: true, configurable: true, enumerable: true,
    });
    defineProperty(NativeError, 'prepareStackTrace', {
      value: asSites, writable: true, configurable: true, enumerable: false,
    });
    if (globalThis.Error !== NativeError) return null;
    captureStackTrace(holder, write);
    return Array.isArray(holder.stack) ? holder.stack : null;
  } catch (error) {
    return null;
  } finally {
    try {
      if (limit) defineProperty(NativeError, 'stackTraceLimit', limit);
      else delete NativeError.stackTraceLimit;
      if (prepare) defineProperty(NativeError, 'prepareStackTrace', prepare);
      else delete NativeError.prepareStackTrace;
    } catch (error) {
      // A property ours replaced is configurable: restoring it cannot fail.
    }
  }
}

function caller() {
  const sites = callSites();
  if (sites === null || !sites.length) return UNREADABLE;
  // write is called by the verifier's own code alone (a reporter, a hook, the preload): one
  // called straight from node (a timer, a promise, an event given write itself) was handed it.
  const direct = String(sites[0].getFileName() || '').replace(/^file:\/\//, '');
  if (!ours.has(direct)) {
    const through = !direct || direct.startsWith('node:') || sites[0].isEval();
    return { why: through ? `code that handed it to ${direct || 'a builtin'} to call` : `code of ${direct}` };
  }
  for (const site of sites) {
    if (site.isEval()) return { why: `code compiled at run time (${site.getEvalOrigin() || 'eval'})` };
    const name = site.getFileName();
    if (!name) continue; // a builtin's own frame (Array.prototype.forEach, Promise.all, ...)
    const file = String(name).replace(/^file:\/\//, '');
    if (ours.has(file)) continue;
    return { file, why: `code of ${file}` };
  }
  return UNREADABLE;
}

// Code no test process wrote: node's own, or an installed package's (node_modules) or the
// image's (/usr) where this process can neither change the file nor replace it or a directory
// above it (node_modules is root's in the verifier; its caches, and a tree a test makes at run
// time, are the tests'), never a file the agent changed.
const agentFiles = (() => {
  try {
    const text = fs.readFileSync('/opt/selfbench-verifier/state/agent-files.txt', 'utf8');
    return new Set(text.split('\n').filter((line) => line.trim()));
  } catch (error) {
    return new Set();
  }
})();
const reach = new Map();

function outOfReach(file) {
  if (!file.startsWith('/') || /(^|\/)\.\.?(\/|$)/.test(file)) return false;
  const uid = process.getuid();
  const groups = new Set([...process.getgroups(), process.getegid()]);
  const writable = (st) => {
    if (uid === 0) return true;
    if (st.uid === uid) return (st.mode & 0o200) !== 0;
    if (groups.has(st.gid)) return (st.mode & 0o020) !== 0;
    return (st.mode & 0o002) !== 0;
  };
  let st;
  try {
    st = fs.lstatSync(file);
  } catch (error) {
    return false;
  }
  if (!st.isFile() || writable(st)) return false;
  let child = st;
  let here = path.dirname(file);
  for (;;) {
    try {
      st = fs.lstatSync(here);
    } catch (error) {
      return false;
    }
    if (!st.isDirectory()) return false;
    // A sticky directory lets us replace only our own entries.
    if (writable(st) && !((st.mode & 0o1000) !== 0 && child.uid !== uid)) return false;
    if (here === '/') return true;
    child = st;
    here = path.dirname(here);
  }
}

function trusted(file) {
  if (file === undefined) return false;
  if (file.startsWith('node:')) return true;
  if (agentFiles.has(file)) return false;
  if (!file.includes('/node_modules/') && !file.startsWith('/usr/')) return false;
  if (!reach.has(file)) reach.set(file, outOfReach(file));
  return reach.get(file);
}

function send(runner, event) {
  if (!address || state.failed) return;
  connect();
  state.queue.push(JSON.stringify({ runner, ...event }));
  if (state.queue.length > 100000) state.queue.splice(0, 1);
  flush();
}

function write(runner, event) {
  const from = caller();
  if (!trusted(from.file)) {
    send(runner, { t: 'tamper', what: `the verifier's reporter was driven by ${from.why}` });
    return;
  }
  send(runner, event);
}

function relative(file) {
  if (!file) return '';
  const text = String(file).replace(/^file:\/\//, '');
  const rel = path.relative('/app', text);
  return rel.startsWith('..') ? text : rel;
}

function absolute(file) {
  if (!file) return undefined;
  return path.resolve(String(file).replace(/^file:\/\//, ''));
}

module.exports = { write, relative, absolute };
