"""A cluster the report's tests draw: three hosts and HA, plain and preemptible VMs of
several sizes, tight enough that a failure preempts, loose enough that every failure
of one host is planned."""

HOSTS = {f"hv{i}": {"yasco_capacity": {"vcpus": 8, "memory_mb": 16384},
                    "yasco_reserved": {"vcpus": 0, "memory_mb": 1024}} for i in (1, 2, 3)}
# HA, plain and preemptible VMs of several sizes: tight enough that a failure
# preempts, loose enough that every failure of one host is planned.
VMS = {
    "web1": {"ha": True, "priority": 10, "vcpus": 2, "memory_mb": 2048,
             "anti_affinity": ["web"]},
    "web2": {"ha": True, "priority": 10, "vcpus": 2, "memory_mb": 2048,
             "anti_affinity": ["web"]},
    "db1": {"ha": True, "priority": 20, "vcpus": 2, "memory_mb": 4096},
    "cache1": {"ha": True, "priority": 5, "vcpus": 1, "memory_mb": 1024},
    "tools1": {"vcpus": 1, "memory_mb": 1024},
    "tools2": {"vcpus": 1, "memory_mb": 2048},
    "ci1": {"vcpus": 2, "memory_mb": 3072},
    "batch1": {"preemptible": True, "vcpus": 2, "memory_mb": 3072},
    "batch2": {"preemptible": True, "vcpus": 2, "memory_mb": 4096},
    "batch3": {"preemptible": True, "vcpus": 1, "memory_mb": 2048},
}
