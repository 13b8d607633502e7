"""Every command the documentation shows is run by a test, and every relative link in
it leads to a file.

The commands are read from the fenced `sh`, `bash`, `console` and `shell` blocks of
README.md, docs/*.md and docs/modules/*.md: comments and blank lines left out, lines
ending in a backslash joined, a here-document kept as the line that starts it.

COVERAGE maps each documented command, by a pattern matching it as written, to the
tests that run it (or the exact playbook or CLI it names), and to a `key`: what those
tests' source must mention (the playbook's file or the name the lab's helpers run it
by, the `yasco-lab` verb, the script). A test's source is its function together with
the fixtures and helpers it uses, read with `ast`; nothing here runs them. UNTESTED
names the documented commands no test runs, each with why; it may only shrink.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs" / "modules").glob("*.md"))]
SHELL = {"sh", "bash", "console", "shell"}

PLAYBOOK = r"(?:\.venv/bin/)?ansible-playbook -i INVENTORY playbooks/"
LAB = r"\.venv/bin/yasco-lab "
ETCD_DEMO = "tests/etcd/test_etcd_modules.py::"
HA = "tests/lab/test_ha.py::"
REPORT = "tests/etcd/test_report_playbook.py::"
POWER = "tests/lab/test_power_and_backup.py::"
BACKUP_TEST = "test_a_wiped_canary_resumes_from_its_full_and_then_its_incremental_backup"


@dataclass(frozen=True)
class Covered:
    pattern: str  # matches the whole command as the docs write it
    key: str  # a regular expression every named test's source must match
    tests: tuple[str, ...]  # "path::function"


COVERAGE = [
    Covered(r"make demo", r'"scripts" / "demo"',
            ("tests/lab/test_demo.py::test_the_demo_tells_each_step_in_order",
             "tests/lab/test_demo.py::test_each_ha_vm_of_the_crashed_host_runs_writes_and_comes_back")),
    # `make watch` runs scripts/watch, INV= naming the inventory, as the tests do.
    Covered(r"(INV=\S+ )?make watch", r'"scripts" / "watch"',
            (HA + "test_a_crashed_hypervisors_ha_vms_run_again_on_their_planned_targets",
             HA + "test_a_flapping_host_gets_nothing_back_and_a_failure_during_its_return_is_evacuated")),  # noqa: E501 - a test's node id
    Covered(LAB + r"up", r'yasco_lab\("up"\)',
            ("tests/lab/test_teardown.py::test_up_after_an_interrupted_up_cleans_up_and_succeeds",)),
    Covered(LAB + r"status( \[--json\]| --json)?", r'yasco_lab\("status", "--json"\)',
            ("tests/lab/test_cluster.py::test_status_json_is_machine_readable",)),
    Covered(LAB + r"(crash|boot) hv\d", r'(?=.*yasco_lab\("crash")(?=.*yasco_lab\("boot")',
            ("tests/lab/test_faults.py::test_crash_kills_every_process_of_the_host_and_boot_brings_it_back",)),
    Covered(LAB + r"(partition|heal) hv\d", r'(?=.*yasco_lab\("partition")(?=.*yasco_lab\("heal")',
            ("tests/lab/test_faults.py::test_partition_cuts_the_host_off_from_etcd_and_ceph_and_heal_restores_it",)),
    Covered(LAB + r"down", r'yasco_lab\("down"\)',
            ("tests/lab/test_teardown.py::test_down_leaves_nothing_behind",)),
    Covered(PLAYBOOK + r"etcd_access\.yml", r'"etcd_access\.yml"',
            ("tests/playbooks/test_etcd_access.py::test_it_prints_the_roles_and_users_for_the_inventorys_hypervisors",)),
    # What etcd_access.yml prints: the test pins the playbook's output to these lines,
    # and the lab applies the same (yasco_lab through plugins/module_utils/adapters/etcd_access.py),
    # whose roles the security test checks.
    Covered(r"etcdctl (role|user) (add|grant-permission|grant-role) yasco-agent-hv1( .*)?",
            r"etcd_access",
            ("tests/playbooks/test_etcd_access.py::test_it_prints_the_roles_and_users_for_the_inventorys_hypervisors",
             "tests/lab/test_security.py::test_every_user_reads_the_cluster_and_nothing_else")),
    Covered(PLAYBOOK + r"etcd_maintenance\.yml -e yasco_etcd_quota_bytes=\d+",
            r'"etcd_maintenance\.yml"',
            ("tests/etcd/test_etcd_housekeeping.py::test_a_full_etcd_keeps_the_agents_lease_ends_none_and_the_watcher_reports_it",  # noqa: E501 - a test's node id
             "tests/etcd/test_etcd_housekeeping.py::test_a_second_run_on_a_quiet_etcd_changes_nothing")),  # noqa: E501 - a test's node id
    Covered(PLAYBOOK + r"notify\.yml -e '\{\"yasco_event\": \{\"type\": \"test\", \"hosts\": \[\]\}\}'",
            r'"notify\.yml"',
            ("tests/playbooks/test_notify.py::test_the_watchers_etcd_events_become_notifications",)),
    Covered(PLAYBOOK + r"plan\.yml( \[--check --diff\])?", r'"plan\.yml"',
            ("tests/playbooks/test_plan.py::test_plan_writes_a_valid_map_and_a_second_run_changes_nothing",
             "tests/playbooks/test_plan.py::test_check_mode_shows_the_diff_and_writes_nothing")),
    Covered(r"/usr/bin/etcd --data-dir /tmp/yasco-etcd-demo .*&"
            r"|export YASCO_ETCD_(ENDPOINTS|ALLOW_INSECURE)=\S+"
            r"|cat > /tmp/demo\.etcd\.yml <<'EOF'",
            r'(?=.*"etcd\.md")(?=.*Trying them)',
            ("tests/etcd/test_etcd_docs_walkthrough.py::test_the_walkthrough_runs_as_written",)),
    Covered(r"export ETCDCTL_API=3|pki=/var/lib/yasco-lab/pki|alias etcdctl=.*"
            r"|etcdctl (get|watch) --prefix /yasco/lab/\S*( --keys-only)?"
            r"|etcdctl get /yasco/lab/vms/web1 -w json",
            r'(?=.*"etcd-schema\.md")(?=.*Reading it by hand)',
            ("tests/lab/test_security.py::test_reading_etcd_by_hand_as_the_docs_show_works_as_the_reader",)),  # noqa: E501 - a test's node id
    Covered(r"ceph osd pool create yasco|rbd pool init yasco"
            r"|ceph auth get-or-create client\.\S+ .*",
            r'(?=.*"production\.md")(?=.*"get-or-create")(?=.*CEPH_CAPS)',
            ("tests/lab/test_security.py::test_the_ceph_set_up_in_the_production_guide_is_what_the_lab_runs",)),  # noqa: E501 - a test's node id
    Covered(PLAYBOOK + r"plan\.yml -e yasco_rebalance_moves=\d+",
            r'(?=.*"plan\.yml")(?=.*"yasco_rebalance_moves=1")',
            ("tests/playbooks/test_plan.py::test_rebalance_moves_lets_that_many_vms_move_to_a_new_host",)),
    Covered(PLAYBOOK + r"plan\.yml --check --diff", r'(?=.*"plan\.yml")(?=.*"--check", "--diff")',
            ("tests/playbooks/test_plan.py::test_check_mode_shows_the_diff_and_writes_nothing",)),
    Covered(PLAYBOOK + r"provision\.yml( \[--check --diff\]| --check --diff)?",
            r'playbook\("provision", inventory, "--check", "--diff"\)',
            ("tests/lab/test_provisioning.py::test_check_mode_reports_a_new_vm_and_creates_nothing",)),
    Covered(PLAYBOOK + r"status\.yml( \[-e yasco_status_json=\S+\])?", r'playbook\("status"',
            ("tests/lab/test_provisioning.py::test_status_flags_a_vm_started_by_hand_on_a_wrong_host",)),
    Covered(PLAYBOOK + r"rebalance\.yml( \[--check\]| --check)?( \[-e yasco_rebalance_concurrency=\d+\])?",  # noqa: E501 - a test's node id
            r'(?=.*playbook\("rebalance", inventory, "--check"\))(?=.*playbook\("rebalance", inventory\))',  # noqa: E501 - a test's node id
            ("tests/lab/test_provisioning.py::test_rebalance_moves_vms_to_new_homes_within_capacity",)),
    Covered(PLAYBOOK + r"remove_vm\.yml -e vm=\S+( \[-e delete_disk=\S+\])?",
            r'playbook\("remove_vm", inventory, vm=name, delete_disk=name\)',
            ("tests/lab/test_provisioning.py::test_remove_vm_keeps_the_disk_unless_confirmed",)),
    Covered(PLAYBOOK + r"power_fence\.yml -e host=hv\d -e state=powered_on",
            r'playbook\("power_fence", ha\["inventory"\], host="hv1", state="powered_on"\)',
            (HA + "test_a_hung_partitioned_hypervisor_is_powered_off_by_its_bmc_before_its_vms_move",)),  # noqa: E501 - a test's node id
    Covered(PLAYBOOK + r"evacuate\.yml", r'playbook\("evacuate"',
            (HA + "test_a_crashed_hypervisors_ha_vms_run_again_on_their_planned_targets",)),
    # The watcher runs return_home.yml on host_stable (rulebooks/ha.yml), with
    # yasco_host; the test waits for it to bring every VM home.
    Covered(PLAYBOOK + r"return_home\.yml -e yasco_host=hv\d( \[-e yasco_return_concurrency=\d+\])?",  # noqa: E501 - a test's node id
            r"wait_until_home",
            (HA + "test_a_crashed_hypervisors_ha_vms_run_again_on_their_planned_targets",
             HA + "test_a_flapping_host_gets_nothing_back_and_a_failure_during_its_return_is_evacuated")),  # noqa: E501 - a test's node id
    Covered(PLAYBOOK + r"drain\.yml -e yasco_host=hv\d( \[-e yasco_drain_reason=\S+\])?",
            r'playbook\("drain", ha\["inventory"\], yasco_host="hv2"\)',
            (HA + "test_a_failure_while_a_host_is_drained_gives_it_nothing_and_undrain_restarts_the_rest",)),  # noqa: E501 - a test's node id
    Covered(PLAYBOOK + r"undrain\.yml -e yasco_host=hv\d",
            r'playbook\("undrain", ha\["inventory"\], yasco_host=host\)',
            (HA + "test_a_drained_hypervisor_hands_its_vms_over_live_and_undrain_brings_them_back",)),  # noqa: E501 - a test's node id
    Covered(PLAYBOOK + r'disarm\.yml -e yasco_disarm_reason="[^"]+"',
            r'playbook\("disarm", ha\["inventory"\], yasco_disarm_reason=',
            (HA + "test_a_disarmed_cluster_restarts_nothing_until_armed_and_an_ignored_vm_stays_down",)),
    Covered(PLAYBOOK + r"disarm\.yml -e yasco_disarm_mode=freeze",
            r'playbook\("disarm", ha\["inventory"\], yasco_disarm_mode="freeze"',
            (HA + "test_a_partition_while_frozen_destroys_nothing_and_rearming_waits_for_the_host",)),
    Covered(PLAYBOOK + r"disarm\.yml -e yasco_ha_disarmed=false",
            r'playbook\("disarm", ha\["inventory"\], yasco_ha_disarmed=False\)',
            (HA + "test_a_disarmed_cluster_restarts_nothing_until_armed_and_an_ignored_vm_stays_down",)),
    Covered(PLAYBOOK + r"report\.yml( -e yasco_report_failed=[\w,]+)?( -e yasco_report_dir=\S+)?",
            r'"report\.yml"',
            (REPORT + "test_the_report_shows_the_incident_in_etcd_and_lands_beside_the_inventory",
             REPORT + "test_a_history_without_failure_draws_no_timeline")),
    # Run as rendered, each AWX and EDA call turned into a debug task and checked
    # against the modules' specs and EDA's published API: no AWX runs in the tests.
    Covered(PLAYBOOK + r"awx_configure\.yml -e @\S+ --ask-vault-pass", r'"awx_configure\.yml"',
            ("tests/playbooks/test_awx_configure.py::test_the_playbook_passes_ansible_playbooks_syntax_check",
             "tests/playbooks/test_awx_configure.py::test_every_awx_call_as_rendered_fits_its_modules_argument_spec")),
    # docs/power.md and docs/backup.md: run on the lab, the shutdown through the UPS
    # trigger, which runs it as written.
    Covered(PLAYBOOK + r"emergency_shutdown\.yml( \[-e yasco_emergency_deadline=\d+\])?",
            r"yasco_emergency_trigger", (POWER + "test_an_emergency_shutdown_evacuates_nothing_and_a_cold_start_brings_all_home",)),  # noqa: E501 - a test's node id
    Covered(PLAYBOOK + r"cold_start\.yml( \[-e yasco_cold_start_gate=\w+\])?", r'"cold_start"',
            (POWER + "test_an_emergency_shutdown_evacuates_nothing_and_a_cold_start_brings_all_home",)),  # noqa: E501 - a test's node id
    Covered(PLAYBOOK + r"snapshot\.yml -e yasco_vms_selected=\S+( \[-e yasco_snapshot_\w+=\w+\])*",
            r'playbook\("snapshot"', (POWER + BACKUP_TEST,)),
    Covered(PLAYBOOK + r"backup\.yml -e yasco_vms_selected=\S+ -e yasco_backup_dir=\S+"
            r"( \[-e yasco_backup_full=true\])?", r'playbook\("backup"', (POWER + BACKUP_TEST,)),
    Covered(PLAYBOOK + r"restore\.yml -e yasco_vm=\S+ -e yasco_backup_dir=\S+"
            r"( \[-e yasco_backup_snapshot=\S+\])?( \[-e yasco_restore_in_place=true\])?",
            r'playbook\("restore"', (POWER + BACKUP_TEST,)),
    Covered(r"ansible-galaxy collection build --force", r'"collection", "build"',
            ("tests/test_collection_build.py::test_ansible_playbook_runs_the_playbooks_by_fqcn",
             "tests/test_repository.py::test_collection_builds_without_the_lab_or_the_venv")),
    # docs/modules/etcd.md's examples: the same modules, lookup and inventory plugin
    # with the same options, run by the tests through playbooks on a real etcd.
    Covered(r"\.venv/bin/ansible localhost -m yasco\.cluster\.etcd_key -a '.*'",
            r'"yasco\.cluster\.etcd_key"',
            (ETCD_DEMO + "test_a_second_identical_write_changes_nothing_and_the_diff_shows_the_change",)),  # noqa: E501 - a test's node id
    Covered(r"\.venv/bin/ansible localhost -m yasco\.cluster\.etcd_key_info -a '.*'",
            r'"yasco\.cluster\.etcd_key_info"',
            (ETCD_DEMO + "test_key_info_reads_a_key_a_prefix_and_a_missing_key_alike_in_check_mode",)),  # noqa: E501 - a test's node id
    Covered(r"\.venv/bin/ansible-playbook /tmp/move-web1\.yml --diff", r"if_revision",
            (ETCD_DEMO + "test_compare_and_swap_writes_when_unchanged_and_fails_naming_what_it_found",)),  # noqa: E501 - a test's node id
    Covered(r"\.venv/bin/ansible localhost -e yasco_etcd_endpoints=\$YASCO_ETCD_ENDPOINTS "
            r"-m ansible\.builtin\.debug -a \"msg=\{\{ lookup\('yasco\.cluster\.etcd', .*\) \}\}\"",
            r"lookup\('yasco\.cluster\.etcd'",
            ("tests/etcd/test_etcd_lookup.py::test_keys_prefixes_defaults_and_json_records",)),
    Covered(r"\.venv/bin/ansible-inventory -i /tmp/demo\.etcd\.yml --graph", r'"ansible-inventory"',
            ("tests/etcd/test_etcd_inventory.py::test_registered_hosts_are_hypervisors_grouped_alive_failed_or_in_maintenance",)),
    # The controller install (scripts/controller): its env, and a playbook by name.
    Covered(r"\. /opt/yasco/env|ansible-playbook -i INVENTORY yasco\.cluster\.plan",
            r'(?=.*"scripts" / "controller")(?=.*yasco\.cluster\.)',
            ("tests/lab/test_eda_controller.py::test_the_controllers_rulebook_launches_evacuate_return_home_and_drain_once",)),  # noqa: E501 - a test's node id
]

# Documented commands that no test runs, each with why. Remove an entry when a test
# comes to run it (and map it in COVERAGE); never add one to make a new command pass.
UNTESTED = {
    r"make test":
        "runs the whole suite: a test of it would run itself; its bootstrap, "
        "scripts/bootstrap, is tests/test_repository.py::test_setup_twice_changes_nothing",
    r"ansible-builder build -f (execution|decision)-environment\.yml --context \S+ -t \S+":
        "needs a container runtime; tests/test_environments.py runs `ansible-builder "
        "create` on the same definitions",
    r"systemctl kill --signal=SIG(STOP|CONT) yasco-agent":
        "the lab runs its agents without systemd; a frozen agent's lease expiring is "
        "what tests/lab/test_agent.py's crash and partition tests reach otherwise",
    PLAYBOOK + r"agent\.yml":
        "the playbook needs systemd and package installs on the hypervisors; its role "
        "yasco.cluster.agent is run by tests/lab/test_agent.py and molecule's agent scenario",
}
UNTESTED_AT_MOST = 4


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def strip_comment(line: str) -> str:
    """The line without a shell comment: a `#` after a blank, outside quotes."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip()
    return line.rstrip()


def shell_blocks(path: Path):
    """(first line number, lines) of each shell block of a Markdown file."""
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = re.match(r"\s*(`{3,})(\S*)", lines[index])
        if not opening:
            index += 1
            continue
        fence, lang = opening.groups()
        start, index = index + 1, index + 1
        while index < len(lines) and not re.match(rf"\s*{fence}\s*$", lines[index]):
            index += 1
        if lang in SHELL:
            yield start + 1, lines[start:index]
        index += 1


def commands_in(path: Path, root: Path = ROOT) -> list[Command]:
    found = []
    for first, lines in shell_blocks(path):
        pending, at, heredoc = "", 0, None
        for number, raw in enumerate(lines, first):
            if heredoc:
                heredoc = None if raw.strip() == heredoc else heredoc
                continue
            line = strip_comment(re.sub(r"^\s*\$ ", "", raw)).strip()
            if not line and not pending:
                continue
            at = at or number
            if line.endswith("\\"):
                pending += line[:-1].rstrip() + " "
                continue
            text = (pending + line).strip()
            pending, start, at = "", at, 0
            marker = re.search(r"<<-?\s*'?\"?(\w+)", text)
            heredoc = marker.group(1) if marker else None
            found.append(Command(str(path.relative_to(root)), start, text))
    return found


@cache
def documented() -> tuple[Command, ...]:
    return tuple(c for path in DOCS for c in commands_in(path))


def matches(pattern: str, command: Command) -> bool:
    return re.fullmatch(pattern, command.text) is not None


# What a test's source is: its function, and the module-level functions, fixtures and
# constants it reaches by name, in its own module, the modules it imports relatively
# and the conftest.py files above it.

@cache
def definitions(path: Path) -> dict[str, str]:
    """Top-level names of a module, fixtures also under their `name=`, to source."""
    text = path.read_text()
    names: dict[str, str] = {}
    for node in ast.parse(text).body:
        source = ast.get_source_segment(text, node) or ""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = source
            for decorator in getattr(node, "decorator_list", []):
                for keyword in getattr(decorator, "keywords", []):
                    if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                        names[keyword.value.value] = source
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = source
    return names


@cache
def scope(path: Path) -> dict[str, str]:
    """Every name a test module can reach: conftest fixtures, relative imports, its own."""
    names: dict[str, str] = {}
    folder = path.parent
    conftests = []
    while folder == TESTS or TESTS in folder.parents:
        if (folder / "conftest.py").exists():
            conftests.append(folder / "conftest.py")
        folder = folder.parent
    for conftest in reversed(conftests):
        names.update(definitions(conftest))
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = path.parent
            for dummy in range(node.level - 1):
                base = base.parent
            module = base.joinpath(*(node.module or "").split(".")).with_suffix(".py")
            if module.exists():
                found = definitions(module)
                names.update({a.asname or a.name: found[a.name]
                              for a in node.names if a.name in found})
    names.update(definitions(path))
    return names


def source_of(node_id: str) -> str | None:
    """The test's function with everything it reaches by name, or None if absent."""
    file, dummy, function = node_id.partition("::")
    path = ROOT / file
    if not path.exists() or function not in definitions(path):
        return None
    names = scope(path)
    seen, todo, parts = set(), [function], []
    while todo:
        name = todo.pop()
        if name in seen or name not in names:
            continue
        seen.add(name)
        parts.append(names[name])
        tree = ast.parse(names[name])
        # Names used, and parameters: a test's fixtures are its parameters.
        todo += [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
        todo += [n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)]
    return "\n".join(parts)


def test_the_docs_show_commands():
    assert len(documented()) > 40, [str(c) for c in documented()]


def test_every_documented_command_is_run_by_a_test_or_listed_untested():
    unmapped = [str(c) for c in documented()
                if not any(matches(e.pattern, c) for e in COVERAGE)
                and not any(matches(p, c) for p in UNTESTED)]
    assert not unmapped, ("documented commands no test runs: add the test and map it in "
                          "COVERAGE:\n" + "\n".join(unmapped))


def test_no_command_is_both_covered_and_untested():
    both = [str(c) for c in documented() if any(matches(e.pattern, c) for e in COVERAGE)
            and any(matches(p, c) for p in UNTESTED)]
    assert not both, both


def test_the_untested_list_only_shrinks():
    assert len(UNTESTED) <= UNTESTED_AT_MOST, (
        "UNTESTED may only shrink: test the new command instead")
    stale = [p for p in UNTESTED if not any(matches(p, c) for c in documented())]
    assert not stale, f"UNTESTED names commands the docs no longer show: {stale}"


@pytest.mark.parametrize("entry", COVERAGE, ids=lambda e: e.pattern[:60])
def test_each_mapping_names_tests_that_exist_and_run_the_command(entry):
    assert any(matches(entry.pattern, c) for c in documented()), (
        f"{entry.pattern} matches no documented command: drop it")
    for node_id in entry.tests:
        source = source_of(node_id)
        assert source is not None, f"{node_id} does not exist"
        assert re.search(entry.key, source, flags=re.S), (
            f"{node_id} does not mention {entry.key!r}: does it still run the command?")


def test_the_command_parser_joins_continuations_and_drops_comments(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```sh\n# a comment\nmake demo   # the demo\n\n"
                    "ansible-playbook -i INVENTORY playbooks/report.yml \\\n"
                    "  -e yasco_report_failed=hv2\ncat > f <<'EOF'\nkey: value # kept\nEOF\n"
                    "echo '# not a comment'\n```\n\n```yaml\nmake: no\n```\n")
    found = [c.text for c in commands_in(page, root=tmp_path)]
    assert found == ["make demo",
                     "ansible-playbook -i INVENTORY playbooks/report.yml "
                     "-e yasco_report_failed=hv2",
                     "cat > f <<'EOF'", "echo '# not a comment'"]


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file(doc):
    broken = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:|#", target):
                continue  # a URL or an anchor in the page
            if not (doc.parent / target.split("#")[0]).exists():
                broken.append(f"{doc.relative_to(ROOT)}:{number}: {target}")
    assert not broken, broken
