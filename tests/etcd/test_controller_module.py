"""A task of this collection on the controller runs in Ansible's own process
(plugin_utils/controller_module.py) and returns exactly what the module returns when
it runs as a module (`yasco_run_on_controller: false`): the same results, failures,
check mode, diff and hidden secrets, against a real etcd and libvirt's test driver."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from .conftest import BIN, ROOT, ansible_env, parse_run, playbook_command, write_playbook

SECRET = "not-in-any-output-7d3f"


def tasks(etcd, auth, prefix: str) -> list[dict]:
    key = f"{prefix}vms/web1"
    connection = {"endpoints": [etcd.url]}
    return [
        {"name": "write", "yasco.cluster.etcd_key": {**connection, "key": key,
                                                     "value": {"host": "hv1"}}},
        {"name": "write again", "yasco.cluster.etcd_key": {**connection, "key": key,
                                                           "value": {"host": "hv1"}}},
        {"name": "compare-and-swap that loses", "ignore_errors": True,
         "yasco.cluster.etcd_key": {**connection, "key": key, "value": "x",
                                    "if_value": {"host": "hv9"}}},
        {"name": "delete in check mode", "check_mode": True, "diff": True,
         "yasco.cluster.etcd_key": {**connection, "key": key, "state": "absent"}},
        {"name": "read", "yasco.cluster.etcd_key_info": {**connection, "key": key}},
        {"name": "unknown option", "ignore_errors": True,
         "yasco.cluster.etcd_key_info": {**connection, "key": key, "colour": "red"}},
        {"name": "wrong password", "ignore_errors": True,
         "yasco.cluster.etcd_key_info": {"endpoints": [auth.url], "key": key,
                                         "username": "root", "password": SECRET}},
        {"name": "a batch that keeps going past a missing domain", "ignore_errors": True,
         "yasco.cluster.libvirt_domain": {"uri": "test:///default", "keep_going": True,
                                          "parallel": 2, "domains": [
                                              {"name": "test", "state": "running"},
                                              {"name": "missing", "state": "running"}]}},
    ]


def run(directory, task_list, *args: str, on_controller: bool):
    path = write_playbook(directory, task_list,
                          vars={"yasco_run_on_controller": on_controller})
    done = subprocess.run(playbook_command(path, *args), cwd=ROOT, env=ansible_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    return done


def comparable(result: dict, prefix: str) -> str:
    """A result without what differs between two runs anyway: each run's own key
    prefix, revisions, timing."""
    kept = {k: v for k, v in result.items()
            if k not in ("invocation", "exception", "duration") and not k.startswith("_")}
    text = json.dumps(kept, sort_keys=True).replace(prefix, "PREFIX/")
    return re.sub(r"revision\W{0,4}\d+", "revision N", text)


def test_a_task_run_in_the_controllers_process_returns_what_the_module_returns(
        etcd, etcd_auth, tmp_path):
    runs, prefixes = {}, {True: "/test/in-process/", False: "/test/as-module/"}
    for on_controller, prefix in prefixes.items():
        done = run(tmp_path, tasks(etcd, etcd_auth, prefix), on_controller=on_controller)
        assert SECRET not in done.stdout + done.stderr
        runs[on_controller] = parse_run(done)
    here, there = runs[True], runs[False]
    assert here.returncode == there.returncode == 0
    assert len(here.results) == len(there.results) == 8
    for mine, theirs in zip(here.results, there.results):
        assert comparable(mine, prefixes[True]) == comparable(theirs, prefixes[False]), (
            mine["_task"])
    named = here.named
    assert named["write"]["changed"] and not named["write again"]["changed"]
    assert named["compare-and-swap that loses"]["failed"]
    assert named["delete in check mode"]["changed"] and named["read"]["exists"]
    assert "Unsupported parameters for (yasco.cluster.etcd_key_info) module: colour" in (
        named["unknown option"]["msg"])
    assert named["wrong password"]["failed"]
    assert named["wrong password"]["invocation"]["module_args"]["password"] != SECRET
    batch = named["a batch that keeps going past a missing domain"]
    assert batch["failed"] and [r.get("failed", False) for r in batch["results"]] == [
        False, True]


@pytest.mark.parametrize("on_controller", [True, False])
def test_only_the_module_path_ships_a_module_to_run(etcd, tmp_path, on_controller):
    """-vvv names the module file Ansible writes and runs; in the controller's process
    there is none."""
    task = {"name": "read", "yasco.cluster.etcd_key_info": {"endpoints": [etcd.url],
                                                            "key": "/test/shipped"}}
    path = write_playbook(tmp_path, [task], vars={"yasco_run_on_controller": on_controller})
    env = {**ansible_env(), "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    done = subprocess.run(playbook_command(path, "-vvv"), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:]
    assert ("AnsiballZ_etcd_key_info.py" in done.stdout) is not on_controller


@pytest.mark.parametrize("task_options", [
    {"become": True, "become_method": "ansible.builtin.su"},  # root to root: no password
    {"environment": {"A": "1"}},
    {"vars": {"ansible_python_interpreter": "/usr/bin/python3"}}])
def test_what_the_controllers_process_cannot_stand_in_for_runs_as_a_module(
        etcd, tmp_path, task_options):
    task = {"name": "read", "yasco.cluster.etcd_key_info": {"endpoints": [etcd.url],
                                                            "key": "/test/shipped"},
            **task_options}
    path = write_playbook(tmp_path, [task])
    env = {**ansible_env(), "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    # Not playbook_command: its interpreter, an extra var, would override the task's.
    done = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           "ansible_connection=local", str(path), "-vvv"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert "AnsiballZ_etcd_key_info.py" in done.stdout, done.stdout[-2000:]
