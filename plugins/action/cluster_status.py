# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of every module of this collection that talks to etcd, Ceph or libvirt:
the module runs in the controller's process when its task runs on the controller
(plugin_utils/controller_module.py says when and why). The file bears the name of
one of them, cluster_status; meta/runtime.yml routes the others here."""

from __future__ import annotations

from ansible_collections.yasco.cluster.plugins.plugin_utils.controller_module import (
    ModuleOnController)


class ActionModule(ModuleOnController):
    pass
