"""Whether an HA watcher leads (cluster/leadership.py), on a fake clock: it leads from
the grant that wins the leader key, keeps leading while its keepalives are answered,
and never believes it leads once etcd can have ended its lease, however long its
requests hang."""

from __future__ import annotations

import random

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.cluster.leadership import (
    STEP_DOWN, Leadership)

TTL = 6.0


def test_a_watcher_leads_from_the_grant_that_wins_and_while_its_keepalives_are_answered():
    leadership = Leadership(TTL)
    assert not leadership.holding and not leadership.leads(0.0)
    leadership.won(lease=7, sent=10.0)
    assert leadership.holding and leadership.lease == 7
    assert leadership.leads(10.0 + TTL * STEP_DOWN)
    for sent in (12.0, 14.0, 16.0):
        assert not leadership.renewed(sent, sent + 0.5)
    assert leadership.leads(16.0 + TTL * STEP_DOWN)
    assert not leadership.due_to_step_down(16.0 + TTL * STEP_DOWN)


def test_a_keepalive_counts_from_when_it_was_sent_not_when_it_was_answered():
    """etcd may have received a late answer's keepalive at any moment after it was
    sent: only the send time bounds the lease's expiry from below."""
    leadership = Leadership(TTL)
    leadership.won(lease=7, sent=0.0)
    leadership.renewed(sent=1.0, now=3.5)  # counts from 1.0
    assert not leadership.leads(1.0 + TTL * STEP_DOWN + 0.01)
    assert leadership.due_to_step_down(1.0 + TTL * STEP_DOWN + 0.01)


def test_an_answer_to_an_older_keepalive_does_not_move_the_leadership_back():
    leadership = Leadership(TTL)
    leadership.won(lease=7, sent=0.0)
    leadership.renewed(sent=4.0, now=4.5)
    leadership.renewed(sent=2.0, now=5.0)  # an earlier request answered last
    assert leadership.leads(4.0 + TTL * STEP_DOWN)


def test_a_keepalive_answered_after_the_leadership_lapsed_resumes_it_as_a_new_one():
    """While a keepalive hung past the step-down, the watcher did not lead and left
    what it saw to a leader; answered, it leads again and says so, to look again."""
    leadership = Leadership(TTL)
    leadership.won(lease=7, sent=0.0)  # leads until 0.6 TTL: 3.6
    assert not leadership.leads(4.0)
    assert leadership.renewed(sent=3.0, now=5.0)  # a keepalive sent at 3, answered at 5
    assert leadership.leads(5.0) and not leadership.leads(3.0 + TTL * STEP_DOWN + 0.01)
    assert not leadership.renewed(sent=5.0, now=5.5)  # no lapse this time
    assert not leadership.renewed(sent=5.5, now=5.5 + TTL)  # too late to lead on it


def test_a_lease_etcd_says_has_expired_ends_the_leadership_at_once():
    leadership = Leadership(TTL)
    leadership.won(lease=7, sent=0.0)
    leadership.expired()
    assert not leadership.holding and not leadership.leads(0.1)


def test_a_leader_that_stepped_down_asks_for_the_key_again_and_leads_on_a_new_lease():
    leadership = Leadership(TTL)
    leadership.won(lease=7, sent=0.0)
    assert leadership.due_to_step_down(TTL)
    leadership.step_down()
    assert not leadership.holding and not leadership.due_to_step_down(TTL)
    leadership.won(lease=8, sent=TTL + 1)
    assert leadership.leads(TTL + 2) and leadership.lease == 8


@pytest.mark.parametrize("seed", range(20))
def test_a_watcher_never_believes_it_leads_once_its_lease_can_have_expired(seed):
    """The leader thread's loop on a fake clock: each request takes from nothing to its
    whole timeout, and etcd answers, loses it or times out at random. Whenever the
    watcher is asked, at any moment, it leads only while etcd still holds its lease:
    etcd ends it `ttl` after the last keepalive it received, received no earlier
    than sent."""
    chance = random.Random(seed)
    leadership = Leadership(TTL)
    now, lease, lease_ends = 0.0, 0, float("-inf")  # etcd's view
    for dummy in range(300):
        sent = now
        now += chance.uniform(0.0, leadership.request_timeout)
        for moment in (sent, (sent + now) / 2, now):  # asked while the request hangs
            assert not leadership.leads(moment) or moment < lease_ends
        outcome = chance.choices(["answered", "lost", "expired"], [8, 3, 0.2])[0]
        if not leadership.holding:
            if outcome == "answered" and lease_ends < sent:  # the key is free
                lease += 1
                received = chance.uniform(sent, now)
                lease_ends = received + TTL
                leadership.won(lease, sent)
        elif outcome == "answered" and lease_ends >= sent:
            received = chance.uniform(sent, now)
            if received <= lease_ends:
                lease_ends = received + TTL
                leadership.renewed(sent, now)
        elif outcome == "expired" or lease_ends < now:
            leadership.expired()
        if leadership.due_to_step_down(now):
            leadership.step_down()
        wait = leadership.every
        for moment in (now, now + wait / 2, now + wait):
            assert not leadership.leads(moment) or moment < lease_ends
        now += wait
