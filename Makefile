# The README's two commands are `make demo` and `make test`; both bootstrap a fresh
# Debian 12 machine first (run as root). `make setup` is the bootstrap alone.
.PHONY: setup test demo watch lab-down bench-vdm bench-provision bench-failover bench-recovery bench-fencing \
	bench-power-fencing bench-migration sanity units chaos lock controller

setup:
	@scripts/bootstrap

test: setup
	@scripts/test

demo: setup
	@scripts/demo

# The HA watcher in the foreground, on the lab unless INV= names an inventory.
watch: setup
	@scripts/watch

lab-down: setup
	.venv/bin/yasco-lab down

# The VDM planner against vSphere-style slots and Ganeti-style N+1 (docs/vdm.md).
bench-vdm: setup
	.venv/bin/python benchmarks/vdm.py

# provision.yml against a naive loop on the lab (docs/provisioning.md).
bench-provision: setup
	.venv/bin/python benchmarks/provision.py

# Crash to HA VMs running and writing again, with the HA watcher, on the lab (docs/ha.md).
bench-failover: setup
	.venv/bin/python benchmarks/failover.py

# A guest panic, a VM killed, a failed start, a clean reboot and a host crash, to the
# canary writing again, with the HA reconciler and without it, on the lab (docs/ha.md).
bench-recovery: setup
	.venv/bin/python benchmarks/recovery.py

# A hung or killed agent: its host's hardware watchdog resets it before its lease is
# seen to expire, against no watchdog (docs/agent.md).
bench-fencing: setup
	.venv/bin/python benchmarks/fencing.py

# A hung, cut-off hypervisor: powered off through its BMC before its HA VM starts
# elsewhere, against the Ceph fence alone, on the lab (docs/production.md).
bench-power-fencing: setup
	.venv/bin/python benchmarks/power_fencing.py

# Live migration of a guest whose memory keeps changing, with QEMU's defaults and with
# each policy yasco_migration can set, on the lab (docs/ha.md, "Live migration").
bench-migration: setup
	.venv/bin/python benchmarks/migration.py

# The nemesis: a fresh lab, then SEEDS (one random seed by default) of EPISODES seeded
# fault episodes each, judged by invariants (docs/lab.md). The lab stays up.
EPISODES ?= 12
SEEDS ?=
chaos: setup
	@set -e; for seed in $${SEEDS:-$$(od -An -N3 -tu4 /dev/urandom)}; do \
	  .venv/bin/yasco-lab chaos --seed $$seed --episodes $(EPISODES); done

# A production controller without the lab (scripts/controller, docs/production.md):
# Debian's bindings and Java, a venv at requirements/lock.txt's versions and the
# collection installed, under PREFIX.
PREFIX ?= /opt/yasco
controller:
	@scripts/controller $(PREFIX)

# requirements/lock.txt, the exact versions every install is held to, resolved again
# from the ranges in requirements/*.in (versions already locked are kept where they
# still fit; `make lock UPGRADE=1` takes the newest in range instead).
lock: setup
	.venv/bin/pip-compile --quiet --strip-extras --no-emit-index-url --no-emit-trusted-host \
	  --no-emit-find-links --annotation-style=line $(if $(UPGRADE),--upgrade) \
	  --output-file requirements/lock.txt \
	  requirements/controller.in requirements/test.in requirements/lab.in lab/pyproject.toml

# ansible-test sanity on the collection (also run by `make test`).
sanity: setup
	.venv/bin/python scripts/ansible_test.py sanity

# ansible-test units on the collection (also run by `make test`).
units: setup
	.venv/bin/python scripts/ansible_test.py units
