'use strict';
// Shared by the verifier's node reporters: one JSON line per event into the run's evidence
// directory (SELFBENCH_EVIDENCE_DIR), a file per process.
const fs = require('fs');
const path = require('path');

const directory = process.env.SELFBENCH_EVIDENCE_DIR || '';
const handles = new Map();

function write(runner, event) {
  if (!directory) return;
  try {
    let fd = handles.get(runner);
    if (fd === undefined) {
      const flags =
        fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_APPEND |
        (fs.constants.O_NOFOLLOW || 0);
      fd = fs.openSync(path.join(directory, `node-${runner}-${process.pid}.jsonl`), flags, 0o600);
      handles.set(runner, fd);
    }
    fs.writeSync(fd, JSON.stringify({ runner, ...event }) + '\n');
  } catch (error) {
    // The evidence is the verifier's concern; a failed write must not change the tests.
  }
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
