# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every part of the HA watcher (the yasco.cluster.etcd_hosts event source) needs to
talk to etcd: a client from the source's arguments, and a read retried until etcd
answers, since a watcher outlives any outage."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)

LOG = logging.getLogger("yasco.cluster.etcd_hosts")
RETRY = 1.0

# Where an unset connection option comes from, as for the modules. EDA controller
# hands a credential's files to ansible-rulebook only through the environment.
_ENVIRONMENT = {"ca_cert": "YASCO_ETCD_CA_CERT", "client_cert": "YASCO_ETCD_CLIENT_CERT",
                "client_key": "YASCO_ETCD_CLIENT_KEY", "username": "YASCO_ETCD_USERNAME",
                "password": "YASCO_ETCD_PASSWORD"}


def client(args: dict[str, Any], timeout: float) -> EtcdClient:
    # A rulebook templates every argument, an unset variable into ''.
    options = {name: args.get(name) or os.environ.get(variable) or None
               for name, variable in _ENVIRONMENT.items()}
    return EtcdClient(args["endpoints"], timeout=timeout, **options)


async def until_answered(what: str, read, *args: Any) -> Any:
    """`read(*args)` in a thread, retried until etcd answers: a watcher outlives any
    outage."""
    while True:
        try:
            return await asyncio.to_thread(read, *args)
        except EtcdError as err:
            LOG.warning("%s: %s; retrying", what, err)
            await asyncio.sleep(RETRY)
