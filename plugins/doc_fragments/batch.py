# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several items in one task: a module's list option of mappings of its own options
(module_utils/adapters/module_run.py runs them).

`DOCUMENTATION` (fragment `yasco.cluster.batch`), listed by every module that takes
such a list: how an item is read, and why it beats a loop (a note; Ansible wants a
fragment to have options, so its options are none). `INDEPENDENT`
(`yasco.cluster.batch.independent`): the options of a batch whose items are
independent of each other (INDEPENDENT_SPEC in module_run.py).
"""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
notes:
  - Several items in one task, in the list option that says so, are each a mapping of
    the module's options; what an item leaves out comes from the task's options. One
    such task is quicker than a loop, which starts the module and connects once per
    item.
"""

    INDEPENDENT = r"""
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
