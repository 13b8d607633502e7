# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""yasco-agent: the YASCO host agent's command, run as the systemd service
yasco-agent by the role yasco.cluster.agent (and by the lab on its hypervisors):

    python3 yasco_agent.py [--config /etc/yasco/agent.yml] [--log-level INFO]

The agent itself is plugins/module_utils/agent/ of the collection (host_agent.py puts
it together; agent_config.py reads its configuration), imported from YASCO_AGENT_LIB
(where the role installs it). Exits 2 on a bad configuration, an etcd over plain http
or without a user among them.
"""

import argparse
import logging
import os
import signal
import socket
import sys
import threading

sys.path.insert(0, os.environ.get("YASCO_AGENT_LIB", "/usr/lib/yasco-agent"))

# pylint: disable=wrong-import-position
from ansible_collections.yasco.cluster.plugins.module_utils.agent import (  # noqa: E402
    agent_config, agent_state, host_agent)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import (  # noqa: E402
    etcd_errors, libvirt as lv)
# pylint: enable=wrong-import-position


def main(argv=None):
    parser = argparse.ArgumentParser(prog="yasco-agent",
                                     description=host_agent.__doc__.split("\n\n", 1)[0])
    parser.add_argument("--config", default="/etc/yasco/agent.yml")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    try:
        config = agent_config.load_config(args.config)
    except agent_config.ConfigError as err:
        sys.stderr.write(f"yasco-agent: {err}\n")
        return 2
    if lv.libvirt is None:
        sys.stderr.write("yasco-agent: libvirt-python is missing (Debian: python3-libvirt)\n")
        return 2
    config.address = config.address or socket.gethostname()
    agent = host_agent.Agent(config)
    try:
        agent.check_etcd_settings()
    except etcd_errors.EtcdError as err:
        sys.stderr.write(f"yasco-agent: {err}\n")
        return 2
    # The handlers only ask: stopping talks to etcd, which a signal handler must not.
    asked = threading.Event()
    signal.signal(signal.SIGTERM, lambda *dummy: asked.set())
    signal.signal(signal.SIGINT, lambda *dummy: asked.set())
    threading.Thread(target=lambda: (asked.wait(), agent.stop()), daemon=True).start()
    host_agent.LOG.info("yasco-agent %s for %s: ttl %s s, self-fence %s s after the last "
                        "keepalive", agent_state.VERSION, config.host, config.ttl,
                        config.ttl - config.margin)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
