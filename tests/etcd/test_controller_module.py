"""A task of this collection on the controller runs in Ansible's own process
(plugin_utils/controller_module.py) and returns exactly what the module returns when
it runs as a module (`yasco_run_on_controller: false`): the same results, failures,
check mode, diff and hidden secrets, against a real etcd and libvirt's test driver."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from .conftest import BIN, ROOT, ansible_env, playbook_command, write_playbook

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


def comparable(result: dict, prefix: str) -> str:
    """A result without what differs between two runs anyway: each run's own key
    prefix, revisions, timing."""
    kept = {k: v for k, v in result.items()
            if k not in ("invocation", "exception", "duration") and not k.startswith("_")}
    text = json.dumps(kept, sort_keys=True).replace(prefix, "PREFIX/")
    return re.sub(r"revision\W{0,4}\d+", "revision N", text)


def test_a_task_run_in_the_controllers_process_returns_what_the_module_returns(
        etcd, etcd_auth, playbook):
    runs, prefixes = {}, {True: "/test/in-process/", False: "/test/as-module/"}
    for on_controller, prefix in prefixes.items():
        runs[on_controller] = playbook(tasks(etcd, etcd_auth, prefix),
                                       vars={"yasco_run_on_controller": on_controller})
        assert SECRET not in runs[on_controller].output
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


SHIPPED = "AnsiballZ_etcd_key_info.py"  # the module file -vvv names, when there is one


def verbose_run(directory, task: dict, interpreter_from_task: bool = False,
                **play) -> subprocess.CompletedProcess[str]:
    """Run `task` with -vvv. With `interpreter_from_task`, the task's own Python
    interpreter counts (as an extra var, playbook_command's would override it)."""
    path = write_playbook(directory, [task], **play)
    command = ([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                "ansible_connection=local", str(path), "-vvv"] if interpreter_from_task
               else playbook_command(path, "-vvv"))
    env = {**ansible_env(), "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def read_task(etcd, **options) -> dict:
    return {"name": "read", "yasco.cluster.etcd_key_info": {"endpoints": [etcd.url],
                                                            "key": "/test/shipped"},
            **options}


@pytest.mark.parametrize("on_controller", [True, False])
def test_only_the_module_path_ships_a_module_to_run(etcd, tmp_path, on_controller):
    """In the controller's process there is no module file to ship."""
    done = verbose_run(tmp_path, read_task(etcd), vars={"yasco_run_on_controller": on_controller})
    assert done.returncode == 0, done.stdout[-2000:]
    assert (SHIPPED in done.stdout) is not on_controller


def test_the_module_a_task_names_by_its_short_name_is_the_one_run_in_process(etcd, tmp_path):
    """Every module's action is one class, which runs the module the task resolved to:
    a short name under the play's `collections` runs etcd_key_info, not another."""
    task = {"name": "read", "etcd_key_info": read_task(etcd)["yasco.cluster.etcd_key_info"]}
    done = verbose_run(tmp_path, task, collections=["yasco.cluster"])
    assert done.returncode == 0, done.stdout[-2000:]
    assert SHIPPED not in done.stdout
    assert '"key": "/test/shipped"' in done.stdout and '"exists": false' in done.stdout


@pytest.mark.parametrize("task_options", [
    {"become": True, "become_method": "ansible.builtin.su"},  # root to root: no password
    {"environment": {"A": "1"}},
    {"vars": {"ansible_python_interpreter": "/usr/bin/python3"}}])
def test_what_the_controllers_process_cannot_stand_in_for_runs_as_a_module(
        etcd, tmp_path, task_options):
    done = verbose_run(tmp_path, read_task(etcd, **task_options), interpreter_from_task=True)
    assert SHIPPED in done.stdout, done.stdout[-2000:]
