"""The alerting rules the collection ships (files/prometheus/yasco.rules.yml): valid
for Prometheus, and each alert tested by `promtool test rules` on series that fire it
and series that must not (tests/data/prometheus/yasco.rules.test.yml). Which metrics
they name, and that a real Prometheus fires them from what the agent and the watcher
serve, is tests/etcd/test_metrics.py."""

from __future__ import annotations

import shutil
import subprocess

import yaml

from .ansible_run import ROOT

RULES = ROOT / "files" / "prometheus" / "yasco.rules.yml"
TESTS = ROOT / "tests" / "data" / "prometheus" / "yasco.rules.test.yml"


def promtool(*args: str, cwd=ROOT) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed (Debian's prometheus): run make setup"
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=120)


def test_the_rules_are_valid_for_prometheus():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_alert_fires_where_it_should_and_not_elsewhere():
    done = promtool("test", "rules", TESTS.name, cwd=TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test_and_says_what_to_do():
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"]
             for rule in group["rules"]]
    tested = {case["alertname"] for test in yaml.safe_load(TESTS.read_text())["tests"]
              for case in test.get("alert_rule_test", [])}
    alerts = {rule["alert"] for rule in rules}
    assert len(alerts) >= 10
    # Those whose condition needs hours of series to reach are exercised on the lab's
    # Prometheus instead (tests/etcd/test_metrics.py): none, for now.
    assert alerts - tested == set(), f"alerts without a promtool test: {alerts - tested}"
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
