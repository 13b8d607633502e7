# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a module supports: check mode, diff mode and the platforms it runs on.

`DOCUMENTATION` (fragment `yasco.cluster.attributes`), which every module lists:
each attribute described, check mode and diff mode in full, on any POSIX host.
`INFO_MODULE` (`yasco.cluster.attributes.info_module`), listed before it by a module
that only reads: the same in check mode, and no diff.

Where fragments give the same attribute, Ansible merges them item by item and the
first one listed stands; a module's own `attributes` stand over every fragment, so one
whose support differs (no diff, details on check mode) says only that.
"""


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Runs in check mode, reporting whether it would change anything,
      without changing it.
    support: full
  diff_mode:
    description: Returns what changes (or would change, in check mode) as a diff
      before and after, with C(--diff).
    support: full
  platform:
    description: The systems the module runs on.
    support: full
    platforms: posix
"""

    INFO_MODULE = r"""
attributes:
  check_mode:
    support: full
    details: It changes nothing, in check mode or not.
  diff_mode:
    support: none
"""
