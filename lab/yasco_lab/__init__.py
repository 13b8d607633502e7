"""yasco-lab: a real YASCO cluster on one machine.

etcd, Ceph (memstore OSD) and libvirtd + QEMU hypervisors, each hypervisor in its
own network, mount, PID and UTS namespaces on a private bridge, reached over SSH
exactly like production hosts. The lab is both the project's test bed and the
default cluster for `make demo`.
"""
