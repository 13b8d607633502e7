# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules support, in the terms of ansible.builtin.action_common_attributes.

`DOCUMENTATION` (fragment `yasco.cluster.attributes`): check mode and diff mode in
full, on any POSIX host. `INFO_MODULE` (`yasco.cluster.attributes.info_module`): a
module that only reads, the same in check mode, with no diff.

A module lists it before ansible.builtin.action_common_attributes: where two
fragments give the same attribute, the first one's settings stand, and that one's
platform says N/A. A module's own `attributes` stand over both, so one whose support
differs (no diff, details on check mode) says so there.
"""


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
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
  platform:
    support: full
    platforms: posix
"""
