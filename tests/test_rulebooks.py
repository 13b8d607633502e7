"""The two HA rulebooks: rulebooks/ha.yml runs the playbooks itself (tested on the
lab by tests/lab/test_ha.py); rulebooks/ha_controller.yml, for an EDA controller
activation, must react to the same events with the same variables through job
templates. Both are read by ansible-rulebook's own schema and parser."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from ansible_rulebook.conf import settings
from ansible_rulebook.rules_parser import parse_rule_sets
from ansible_rulebook.validators import Validate

RULEBOOKS = Path(__file__).resolve().parents[1] / "rulebooks"


def load(name: str) -> list[dict]:
    return yaml.safe_load((RULEBOOKS / name).read_text())


@pytest.mark.parametrize("name", ["ha.yml", "ha_controller.yml"])
def test_a_rulebook_passes_ansible_rulebooks_schema_and_parser(name, monkeypatch):
    # ansible-rulebook finds collections (the event source's) with ansible-galaxy,
    # which finds this checkout through its ansible.cfg.
    monkeypatch.setattr(settings, "ansible_galaxy_path",
                        str(Path(sys.executable).parent / "ansible-galaxy"))
    monkeypatch.setenv("ANSIBLE_CONFIG", str(RULEBOOKS.parent / "ansible.cfg"))
    rulebook = load(name)
    Validate.rulebook(rulebook)
    (ruleset,) = parse_rule_sets(rulebook, {"yasco_etcd_endpoints": ["http://127.0.0.1:2379"],
                                            "yasco_cluster_name": "yasco"})
    assert [source.source_name for source in ruleset.sources] == ["yasco.cluster.etcd_hosts"]


def test_the_controllers_rulebook_reacts_as_the_local_one_does_through_job_templates():
    (local,), (controller,) = load("ha.yml"), load("ha_controller.yml")
    assert controller["sources"] == local["sources"]
    assert [r["name"] for r in controller["rules"]] == [r["name"] for r in local["rules"]]
    for mine, theirs in zip(local["rules"], controller["rules"]):
        assert theirs["condition"] == mine["condition"], mine["name"]
        action, = mine["action"]
        if action != "run_playbook":
            assert theirs["action"] == mine["action"], mine["name"]
            continue
        template = theirs["action"]["run_job_template"]
        # A job template launched with the playbook's variables: the event gets through.
        assert template["job_args"]["extra_vars"] == mine["action"]["run_playbook"][
            "extra_vars"], mine["name"]
        playbook = mine["action"]["run_playbook"]["name"].rsplit(".", 1)[-1]
        assert playbook.replace("_", " ") in template["name"].lower(), mine["name"]
