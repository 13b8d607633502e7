"""What the history takes of an agent's event (cluster_events.from_agent) and where the
agents' events wait for the HA watcher: the checks alone, with no etcd (the copy
itself runs against a real etcd in tests/etcd/test_agent_events.py)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import KeyValue
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

CLUSTER = "prod"
NOW = 1_700_000_000 * 10**9
SELF_FENCE = cluster_events.event("self-fenced", host="hv1", by="agent",
                                  details={"at": 1.5, "destroyed": ["web1"], "reason": "etcd"})


def kv(key: str, value, revision: int = 5) -> KeyValue:
    text = value if isinstance(value, str) else json.dumps(value)
    return KeyValue(key, text, revision, revision, 1, 0)


def test_an_agents_event_keeps_what_it_says_of_itself_with_its_host_and_writer_forced():
    assert cluster_events.from_agent("hv1", json.dumps(SELF_FENCE)) == SELF_FENCE
    unsigned = {k: v for k, v in SELF_FENCE.items() if k not in ("host", "by")}
    assert cluster_events.from_agent("hv1", json.dumps(unsigned)) == SELF_FENCE


def test_fields_the_history_does_not_know_are_left_out():
    extra = {**SELF_FENCE, "source": {"key": "/yasco/prod/vms/web1", "revision": 1},
             "waiting": False}
    assert cluster_events.from_agent("hv1", json.dumps(extra)) == SELF_FENCE


@pytest.mark.parametrize("value, why", [
    ({**SELF_FENCE, "host": "hv2"}, "host 'hv2': not hv1, who wrote it"),
    ({**SELF_FENCE, "by": "evacuate"}, "by 'evacuate': not agent, who wrote it"),
    ({**SELF_FENCE, "kind": "fenced"}, "kind 'fenced': an agent writes only self-fenced, "
                                       "crashed, restarted"),
    ({**SELF_FENCE, "kind": "note"}, "kind 'note'"),
    ({k: v for k, v in SELF_FENCE.items() if k != "kind"}, "kind None"),
    ("not json", "not a JSON object"),
    ([SELF_FENCE], "not a JSON object"),
    ("null", "not a JSON object"),
    ({**SELF_FENCE, "at": "yesterday"}, "at 'yesterday': not an ISO 8601 time"),
    ({**SELF_FENCE, "at": 1700000000}, "at 1700000000"),
    ({**SELF_FENCE, "vm": "../vms/web1"}, "vm '../vms/web1': not a VM's name"),
    ({**SELF_FENCE, "vm": "web\n1"}, "not a VM's name"),
    ({**SELF_FENCE, "details": "a string"}, "details: not a JSON object"),
    ({**SELF_FENCE, "details": {"reason": "x" * 1025}},
     "details: a string of 1025 characters, more than 1024"),
    ({**SELF_FENCE, "details": {"x" * 1025: 1}}, "more than 1024"),
    ({**SELF_FENCE, "details": {"a": {"b": {"c": {"d": []}}}}}, "nested deeper than 4"),
    ('{"kind": "crashed", "at": "2024-01-01T00:00:00+00:00", "details": {"n": NaN}}',
     "details: nan is no JSON number"),
    ({**SELF_FENCE, "details": {"destroyed": ["web"] * 2000}}, "more than 8192"),
])
def test_an_event_an_agent_may_not_write_is_refused_saying_why(value, why):
    text = value if isinstance(value, str) else json.dumps(value)
    with pytest.raises(ValueError) as refused:
        cluster_events.from_agent("hv1", text)
    assert why in str(refused.value)


def test_a_refusal_quotes_what_the_agent_wrote_escaped_and_short():
    with pytest.raises(ValueError) as refused:
        cluster_events.from_agent("hv1", json.dumps({**SELF_FENCE, "kind": "x\n" * 100}))
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 120


def test_an_agents_event_key_names_its_host_and_its_number():
    key = etcd_keys.host_event_key("hv1", 42, cluster=CLUSTER)
    assert key == "/yasco/prod/hosts/hv1/events/00000000000000000042"
    assert etcd_keys.parse_key(key, cluster=CLUSTER) == ("host_event", "hv1", None)
    assert etcd_keys.event_number(key) == 42
    assert etcd_keys.event_number(etcd_keys.history_key(7, cluster=CLUSTER)) == 7
    assert etcd_keys.parse_key(key[:-1], cluster=CLUSTER) is None  # 19 digits
    assert etcd_keys.parse_key("/yasco/prod/hosts/hv1/events/x", cluster=CLUSTER) is None
    assert etcd_keys.event_number("/yasco/prod/hosts/hv1/alive") is None


def test_readers_see_the_waiting_events_as_they_will_be_copied_and_not_the_others():
    def event_key(host: str, number: int) -> str:
        return etcd_keys.host_event_key(host, number, cluster=CLUSTER)

    kvs = [kv(etcd_keys.alive_key("hv1", cluster=CLUSTER), {"ttl": 5}),
           kv(event_key("hv1", NOW - 10), {**SELF_FENCE, "host": None}),
           kv(event_key("hv2", NOW - 5), {**SELF_FENCE, "host": "hv1"}),  # not hv2's own
           kv(event_key("hv2", NOW - 4), "garbage"),
           kv(event_key("hv2", NOW + 2 * 10**9), {**SELF_FENCE, "host": "hv2"}),  # 2 s ahead
           kv(event_key("hv2", NOW + cluster_events.AGENT_AHEAD_NS + 1),  # far ahead
              {**SELF_FENCE, "host": "hv2"})]
    found = cluster_events.waiting(kvs, cluster=CLUSTER, now_ns=NOW)
    assert [(e["key"], e["host"], e["waiting"]) for e in found] == [
        (event_key("hv1", NOW - 10), "hv1", True), (event_key("hv2", NOW + 2 * 10**9), "hv2", True)]
    assert found[0]["source"] == {"key": event_key("hv1", NOW - 10), "revision": 5}
