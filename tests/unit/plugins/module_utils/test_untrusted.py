"""What a hypervisor wrote, made inert before the HA watcher hands it to a playbook
(module_utils/cluster/untrusted.py): no template delimiter and no control character
survives, at any depth, and names and numbers pass as they are. The event source's
tests (tests/etcd/test_etcd_hosts_source.py) and the attack through the real
ansible-rulebook (tests/etcd/test_untrusted_events.py) show it where events leave the
watcher."""

from __future__ import annotations

import re

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.cluster.untrusted import (
    LONGEST, inert, inert_text, is_inert)

# What Jinja and ansible-core take for the start of a template.
DELIMITERS = re.compile(r"\{[{%#]")
ATTACKS = [
    "{{ lookup('pipe', 'touch /tmp/pwned') }}",
    "{% for x in range(9) %}{{ x }}{% endfor %}",
    "{#c#}{{{{7*7}}}}",
    "{{{{{",
    "a {{\n}} b",
    "reason\n2026-12-08 00:00:00 WARNING forged log line",
    "\x1b[2J\x1b[Hcleared the terminal",
]


@pytest.mark.parametrize("text", ATTACKS)
def test_no_template_delimiter_nor_control_character_survives(text):
    made = inert_text(text)
    assert not DELIMITERS.search(made), made
    assert not re.search(r"[\x00-\x1f\x7f]", made), made
    # Idempotent: made inert twice reads the same.
    assert inert_text(made) == made


def test_a_person_still_reads_what_was_written():
    assert inert_text("{{ lookup('pipe', 'id') }}") == "{ { lookup('pipe', 'id') }}"
    assert inert_text("one\ntwo") == "one\\ntwo"


@pytest.mark.parametrize("plain", ["hv1", "web-01.example.com", "firmware upgrade",
                                   "a {single} brace", "x}}y", ""])
def test_names_and_plain_text_pass_as_they_are(plain):
    assert inert_text(plain) == plain and is_inert(plain)


def test_every_string_at_any_depth_and_every_key_is_made_inert_and_the_rest_kept():
    payload = {"type": "vm_restarted", "hosts": ["hv1"], "count": 3, "resync": False,
               "none": None, "{{ key }}": {"nested": ["{% x %}", {"deep": "{#c#}"}]}}
    made = inert(payload)
    assert made == {"type": "vm_restarted", "hosts": ["hv1"], "count": 3, "resync": False,
                    "none": None,
                    "{ { key }}": {"nested": ["{ % x %}", {"deep": "{ #c#}"}]}}
    assert not is_inert(payload) and is_inert(made)


def test_text_longer_than_anything_the_watcher_hands_on_is_cut_and_says_so():
    made = inert_text("x" * (LONGEST + 500))
    assert made.startswith("x" * LONGEST) and made.endswith("(500 more characters)")
