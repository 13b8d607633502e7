"""The migration policy as libvirt gets it: flags and typed parameters."""

from __future__ import annotations

import libvirt

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_migration import (
    MigrationPolicy)


def test_unset_options_keep_qemus_behaviour():
    policy = MigrationPolicy.from_options({"bandwidth": None, "auto_converge": None})
    assert policy == MigrationPolicy() and policy.flags() == 0 and policy.params() == {}


def test_each_option_becomes_its_flag_or_parameter():
    policy = MigrationPolicy.from_options({"bandwidth": 400, "auto_converge": True,
                                           "compressed": True})
    assert policy.flags() == libvirt.VIR_MIGRATE_AUTO_CONVERGE | libvirt.VIR_MIGRATE_COMPRESSED
    assert policy.params() == {libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: 400}


def test_the_bandwidth_cap_holds_in_post_copy_too():
    policy = MigrationPolicy(bandwidth=8, post_copy_after=5.0)
    assert policy.flags() == libvirt.VIR_MIGRATE_POSTCOPY
    assert policy.params() == {libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: 8,
                               libvirt.VIR_MIGRATE_PARAM_BANDWIDTH_POSTCOPY: 8}
    assert MigrationPolicy(post_copy_after=5.0).params() == {}
