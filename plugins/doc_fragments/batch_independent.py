# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of a batch whose items are independent of each other
(module_utils/adapters/module_run.py, INDEPENDENT_SPEC)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  keep_going:
    description:
      - With a list of items, go on past an item that fails. The task still fails,
        after every item has been tried, naming each failed one; its entry in
        RV(results) has C(failed) and C(msg).
      - Without it, the first failure stops the batch, and no item after it is
        started.
    type: bool
    default: false
    version_added: 0.1.0
  parallel:
    description:
      - With a list of items, how many run at once, started in the list's order.
        Each runs over its own connection.
      - V(1) runs them one after another.
    type: int
    default: 1
    version_added: 0.1.0
"""
