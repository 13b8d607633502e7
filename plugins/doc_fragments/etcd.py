# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The documentation of the etcd connection options, in one place.

`DOCUMENTATION` (fragment `yasco.cluster.etcd`) documents `ETCD_ARGUMENT_SPEC` in
plugins/module_utils/adapters/etcd_module.py, for the modules and for the lookup and
inventory plugins. A plugin reads the options through Ansible's configuration, so it
also lists `PLUGINS` (fragment `yasco.cluster.etcd.plugins`), after it: each option's
environment variable as a configuration source (`env`), which a module's argument
spec reads on its own. Ansible merges the fragments' options key by key; the lookup
adds its variable sources (`vars`) in its own documentation the same way.

Its notes point to the layout of the cluster's keys (docs/etcd-schema.md), which
every module and plugin that talks to etcd reads or writes.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  endpoints:
    description:
      - The client URLs of etcd's members, such as V(https://10.0.0.1:2379) or
        V(https://etcd1.example.com:2379), tried in this order. A request goes to the
        first that answers; when that one stops answering, to the next.
      - A V(http) URL is refused, naming it, unless E(YASCO_ETCD_ALLOW_INSECURE=1) is
        in the environment, which is for a lab's or a test's throwaway etcd alone.
      - When not set, the comma-separated list in the environment variable
        E(YASCO_ETCD_ENDPOINTS) is used.
      - Set it for all etcd modules at once with C(module_defaults) and the action
        group C(group/yasco.cluster.etcd), usually from C(yasco_etcd_endpoints).
    type: list
    elements: str
    required: true
  ca_cert:
    description:
      - The PEM file of the CA that signed etcd's server certificates, for
        V(https) endpoints. Without it, the system's trusted CAs are used.
      - When not set, the environment variable E(YASCO_ETCD_CA_CERT) is used.
    type: path
  client_cert:
    description:
      - The PEM file of the client certificate, when etcd requires one
        (C(--client-cert-auth)).
      - When not set, the environment variable E(YASCO_ETCD_CLIENT_CERT) is used.
    type: path
  client_key:
    description:
      - The PEM file of the client certificate's private key, unless it is in
        O(client_cert).
      - When not set, the environment variable E(YASCO_ETCD_CLIENT_KEY) is used.
    type: path
  username:
    description:
      - The etcd user to authenticate as. Requires O(password).
      - Without it, and against an etcd whose authentication is off, every request
        is refused, naming the endpoint, unless E(YASCO_ETCD_ALLOW_INSECURE=1) is in
        the environment, which is for a lab's or a test's throwaway etcd alone.
      - When not set, the environment variable E(YASCO_ETCD_USERNAME) is used.
    type: str
  password:
    description:
      - The password of O(username).
      - When not set, the environment variable E(YASCO_ETCD_PASSWORD) is used.
    type: str
  timeout:
    description:
      - Seconds to wait for each endpoint to connect and to answer each request.
    type: float
    default: 5
notes:
  - The cluster's keys in etcd, in C(docs/etcd-schema.md) of the collection.
  - Needs the Python library C(etcd3gw) where it runs. It talks to etcd's v3 JSON
    gateway, which etcd 3.4 and later serve on the client URLs.
  - Proxy settings in the environment (C(HTTP_PROXY) and the like) are ignored for
    etcd's endpoints.
requirements:
  - etcd3gw
"""

    PLUGINS = r"""
options:
  endpoints:
    env:
      - name: YASCO_ETCD_ENDPOINTS
  ca_cert:
    env:
      - name: YASCO_ETCD_CA_CERT
  client_cert:
    env:
      - name: YASCO_ETCD_CLIENT_CERT
  client_key:
    env:
      - name: YASCO_ETCD_CLIENT_KEY
  username:
    env:
      - name: YASCO_ETCD_USERNAME
  password:
    env:
      - name: YASCO_ETCD_PASSWORD
"""
