"""Write the HA watcher's variables (rulebooks/ha.yml's --vars) from an inventory.

Usage: watch_vars.py INVENTORY OUT. The values are the hypervisors' own, templated as
a playbook would see them, so that a password kept in a vault or read by a lookup
reaches the watcher as its value. The watcher's password is not written to OUT: it is
printed on standard output, for the caller to hand over in the environment.
"""

from __future__ import annotations

import json
import os
import sys

from ansible import constants as C
from ansible.cli import CLI
from ansible.errors import AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.vars.manager import VariableManager

# What the rulebook reads, beside yasco_etcd_endpoints and yasco_cluster_name.
PASSWORD = "yasco_etcd_watcher_password"
OPTIONAL = ("yasco_return_hold_down", "yasco_recovery", "yasco_reconcile_interval",
            "yasco_watcher_metrics_listen", "yasco_etcd_quota_bytes",
            "yasco_etcd_ca_cert", "yasco_etcd_watcher_client_cert",
            "yasco_etcd_watcher_client_key", "yasco_etcd_watcher_username", PASSWORD)


def main(inventory_path: str, out: str) -> None:
    init_plugin_loader(C.COLLECTIONS_PATHS)  # lookups and filters, as ansible-playbook has them
    loader = DataLoader()
    # Vault passwords as ansible-playbook finds them (ansible.cfg, the environment).
    loader.set_vault_secrets(CLI.setup_vault_secrets(
        loader, vault_ids=C.DEFAULT_VAULT_IDENTITY_LIST,
        vault_password_files=list(C.DEFAULT_VAULT_PASSWORD_FILE or []), auto_prompt=False))
    inventory = InventoryManager(loader=loader, sources=[inventory_path])
    hosts = inventory.get_hosts("yasco_hypervisors") or inventory.get_hosts()
    if not hosts:
        sys.exit(f"watch: error: {inventory_path} has no hosts")
    variables = VariableManager(loader=loader, inventory=inventory).get_vars(host=hosts[0])
    if "yasco_etcd_endpoints" not in variables:
        sys.exit(f"watch: error: {inventory_path} sets no yasco_etcd_endpoints for its "
                 "hypervisors")
    templar = Templar(loader=loader, variables=variables)
    wanted = {"yasco_etcd_endpoints": variables["yasco_etcd_endpoints"],
              "yasco_cluster_name": variables.get("yasco_cluster_name", "yasco")}
    wanted.update({name: variables[name] for name in OPTIONAL if name in variables})
    try:
        resolved = {name: templar.template(value) for name, value in wanted.items()}
    except AnsibleError as err:
        sys.exit(f"watch: error: {inventory_path}: {err.message}")
    password = resolved.pop(PASSWORD, None) or ""
    descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        json.dump(resolved, stream)
    sys.stdout.write(str(password))


if __name__ == "__main__":
    main(*sys.argv[1:3])
