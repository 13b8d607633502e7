"""The duration histogram the HA watcher keeps between scrapes (metrics.Durations)."""

from __future__ import annotations

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.metrics import Durations


def test_durations_fall_in_every_bucket_at_or_above_them_and_add_up():
    durations = Durations((30, 10))
    for seconds in (4.5, 10, 12, 700):
        durations.observe(seconds)
    buckets, total = durations.buckets()
    assert buckets == [("10", 2), ("30", 3), ("+Inf", 4)]
    assert total == 726.5 and durations.count == 4


def test_no_duration_yet_is_zero_everywhere():
    assert Durations((5,)).buckets() == ([("5", 0), ("+Inf", 0)], 0.0)
