# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a hypervisor wrote, made safe to hand on: data, never a template.

A hypervisor's agent writes its own keys in etcd (its registration, its maintenance
marker, the VMs it restarted and why). Root on that hypervisor writes what it likes
there. Whatever the HA watcher hands to a playbook becomes an extra variable, and
ansible-core renders every template it finds in an extra variable's value: a reason of
``{{ lookup('pipe', ...) }}`` would run on the controller, which holds the fencing key,
every etcd credential and SSH to every hypervisor. So every event leaves the watcher
through `inert`, which leaves names and numbers as they are and breaks every template
delimiter ansible-core or Jinja knows (``{{``, ``{%``, ``{#``) by a space after its
brace, and shows control characters (a forged log line's newline, a terminal's escape)
as escapes. A person still reads what was written.
"""

from __future__ import annotations

import re
from typing import Any

# A brace that opens a Jinja expression, statement or comment.
_DELIMITER = re.compile(r"\{(?=[{%#])")
# What could forge a log line, or drive a terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
# Longer text is cut: nothing the watcher hands on needs more, and a hypervisor must
# not be able to fill the controller's logs with one key.
LONGEST = 1024


def inert_text(text: str) -> str:
    """`text` that no template engine renders, and no log reader takes for two lines."""
    if len(text) > LONGEST:
        text = text[:LONGEST] + f"... ({len(text) - LONGEST} more characters)"
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return _DELIMITER.sub("{ ", text)


def inert(value: Any) -> Any:
    """`value` (JSON-like: mappings, lists, strings, numbers) with every string, key
    or value, at any depth, made inert."""
    if isinstance(value, str):
        return inert_text(value)
    if isinstance(value, dict):
        return {inert(key): inert(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert(item) for item in value]
    return value


def is_inert(value: Any) -> bool:
    """Whether `inert` would leave `value` as it is."""
    return inert(value) == value
