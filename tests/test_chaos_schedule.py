"""The nemesis's schedules (lab/yasco_lab/chaos.py), which need no lab: a seed gives
one schedule, always the same, over the hosts and HA VMs it is given; and a run's
report names each violation's episode and seed with the timeline around it. Its runs
on the lab: tests/lab/test_ha.py and `yasco-lab chaos`."""

from __future__ import annotations

import time

from yasco_lab import chaos

HOSTS = ["hv1", "hv2", "hv3"]


def test_a_seed_gives_the_same_schedule_every_time_and_another_seed_another():
    first = chaos.draw(11, 12, HOSTS, ["a", "b"])
    assert chaos.draw(11, 12, HOSTS, ["a", "b"]) == first
    assert chaos.draw(12, 12, HOSTS, ["a", "b"]) != first
    assert len(first) == 12


def test_every_fault_is_drawn_and_aims_at_what_it_can_hit():
    episodes = [e for seed in range(40) for e in chaos.draw(seed, 12, HOSTS, ["a", "b"])]
    assert {e["fault"] for e in episodes} == set(chaos.FAULTS)
    for episode in episodes:
        hold = episode["hold"]
        if episode["fault"] == "qemu-kill":
            assert episode["target"] in ("a", "b") and hold == 0
            continue
        assert chaos.HOLD[0] <= hold <= chaos.HOLD[1]
        if episode["fault"] == "overlap":
            then = episode["then"]
            assert then["target"] != episode["target"] and then["target"] in HOSTS
            assert 1 <= then["after"] <= hold
        elif episode["fault"] != "etcd-leader-stop":
            assert episode["target"] in HOSTS


def test_the_stories_are_drawn_only_when_asked_and_leave_the_short_runs_schedule_alone():
    # The short run in make test (seed 2, the plain faults) keeps its schedule.
    assert [chaos.describe(e) for e in chaos.draw(2, 3, HOSTS, ["a", "b"])] == [
        "partition hv1, and 14.4 s later crash hv3, held 38.1 s", "QEMU of b killed",
        "partition hv1, held 11.6 s"]
    episodes = [e for seed in range(40)
                for e in chaos.draw(seed, 12, HOSTS, ["a", "b"], chaos.ALL_FAULTS)]
    assert {e["fault"] for e in episodes} == set(chaos.ALL_FAULTS)
    for episode in episodes:
        if episode["fault"] == "leader-kill":  # killed while the crash is evacuated
            assert chaos.AGENT_TTL <= episode["after"] < episode["hold"]
            assert episode["target"] in HOSTS
        elif episode["fault"] == "drain-crash":
            assert episode["then"]["target"] != episode["target"]
            assert {episode["target"], episode["then"]["target"]} <= set(HOSTS)
            assert 1 <= episode["then"]["after"] <= 10
        elif episode["fault"] in ("disarm-partition", "etcd-cut"):
            assert episode["target"] in HOSTS and chaos.HOLD[0] <= episode["hold"]
    assert chaos.describe({"fault": "disarm-partition", "target": "hv2", "hold": 9}) == (
        "HA disarmed (freeze), partition hv2, held 9 s, re-armed")


def test_a_violation_is_reported_with_its_episode_seed_and_timeline():
    run = chaos.Run(5, chaos.draw(5, 2, HOSTS, ["a"]))
    run.note("episode 1: something")
    run.episode = 1
    run.violate("I1", "a RUNS TWICE, on hv1, hv2", {"copies": ["hv1", "hv2"]})
    run.timeline.append((time.time() + 3600, "long after"))
    text = chaos.report(run)
    assert text.startswith(f"I1 in episode 1 ({chaos.describe(run.schedule[0])}), seed 5: "
                           "a RUNS TWICE")
    assert "episode 1: something" in text and "long after" not in text
