# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters that read a batch task's registered result: a module run over many
items with keep_going (libvirt_domain's `domains`, say)."""

from __future__ import annotations


def batch_succeeded(result):
    """The names of the items a batch task (with keep_going) did, from its registered
    result; none when it was skipped."""
    return [item.get("name") for item in (result or {}).get("results") or []
            if item and not item.get("failed")]


def batch_errors(result):
    """Why a batch task failed, as a list of one message; empty when it did not."""
    return [result.get("msg", "failed")] if (result or {}).get("failed") else []


class FilterModule:
    def filters(self):
        return {"batch_succeeded": batch_succeeded, "batch_errors": batch_errors}
