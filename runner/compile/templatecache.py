"""Compiled jinja2 templates kept between runs (`<cache>/templates/`).

Compiling the Dockerfile, script and report.html templates took ~0.08 s of every verify on
this project's 2-core machine (the templates are the same from run to run). jinja2's own
file-system bytecode cache keys each entry by the template's name and a checksum of its
source, and writes it atomically, so an edited template is compiled afresh and concurrent
runners do not clash; an entry it cannot read is compiled again. The output never depends on
the cache: it is the same template code, loaded instead of compiled.
"""

from __future__ import annotations

import jinja2

from runner.model.settings import cache_root

TEMPLATES_DIR = "templates"


def bytecode_cache() -> jinja2.BytecodeCache | None:
    """The cache, or None (templates compiled each time) where its directory cannot be made."""
    directory = cache_root() / TEMPLATES_DIR
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(directory))
