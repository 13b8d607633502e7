# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""yasco.cluster.ceph_fence, run in the controller's process when its task runs on the
controller (plugin_utils/controller_module.py says when and why)."""

from __future__ import annotations

from ansible_collections.yasco.cluster.plugins.plugin_utils.controller_module import (
    ModuleOnController)


class ActionModule(ModuleOnController):
    pass
