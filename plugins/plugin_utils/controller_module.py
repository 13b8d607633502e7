# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run one of this collection's modules inside the controller's worker process when
its task runs on the controller itself, as every task that talks to etcd, Ceph or a
hypervisor's libvirt does in our playbooks.

Why: a module run costs a Python start, Ansible's module packaging and the bindings'
imports, 0.3 to 0.9 s on a busy controller, several times what the etcd request or
the libvirt call itself takes. The evacuation's critical path is a handful of such
tasks between a lease's expiry and the HA VMs running again, so this is where its
seconds go. In the worker, which Ansible forks afresh for every task, the same
module code runs against the same argument spec and returns the same result.

The module runs as a module, unchanged, whenever the controller's process cannot
stand in for it: another connection than `local`, `become`, `async`, an
`environment` for the task, a Python interpreter set to another than the one
running Ansible, or `yasco_run_on_controller: false`.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.utils.unsafe_proxy import wrap_var

# Turns the in-process path off (true by default); tests set it to run the module.
SWITCH = "yasco_run_on_controller"


class _Exited(BaseException):
    """exit_json or fail_json was called: like SystemExit for a module, nothing in a
    module's own error handling catches it."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__()
        self.result = result


class ControllerModule:
    """What this collection's modules use of AnsibleModule (`params`, `check_mode`,
    `_diff`, `warn`, `run_command`, `exit_json`, `fail_json`), over the task's arguments
    validated here the way AnsibleModule validates them, secrets (`no_log`) removed
    from the result."""

    def __init__(self, argument_spec: dict[str, Any], supports_check_mode: bool = False,
                 mutually_exclusive=None, required_together=None, required_one_of=None,
                 required_if=None, required_by=None, *, name: str, args: dict[str, Any],
                 check_mode: bool, diff: bool) -> None:
        self.name = name
        self.check_mode = check_mode
        self._diff = diff
        validation = ArgumentSpecValidator(
            argument_spec, mutually_exclusive=mutually_exclusive,
            required_together=required_together, required_one_of=required_one_of,
            required_if=required_if, required_by=required_by).validate(args)
        self.params = validation.validated_parameters
        self.no_log_values = validation._no_log_values  # pylint: disable=protected-access
        self.warnings = [w["warning"] if isinstance(w, dict) else str(w)
                         for w in validation._warnings]  # pylint: disable=protected-access
        if validation.error_messages:
            message = validation.errors.msg
            if isinstance(validation.errors[0], UnsupportedError):
                message = f"Unsupported parameters for ({name}) module: {message}"
            self.fail_json(msg=message)
        if check_mode and not supports_check_mode:
            self.exit_json(skipped=True, msg="this module does not support check mode")

    def _result(self, result: dict[str, Any]) -> dict[str, Any]:
        result.setdefault("invocation", {"module_args": self.params})
        if self.warnings:
            result["warnings"] = self.warnings
        # As a module's result travels: plain JSON types, secrets replaced.
        return json.loads(json.dumps(remove_values(result, self.no_log_values), default=str))

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)

    def run_command(self, args: list[str]) -> tuple[int, str, str]:
        """AnsibleModule.run_command for an argument list: no shell, output as text."""
        try:
            done = subprocess.run(args, capture_output=True, text=True, check=False)
        except OSError as err:  # as AnsibleModule.run_command reports a missing command
            return 127, "", f"{args[0]}: {err.strerror}"
        return done.returncode, done.stdout, done.stderr

    def exit_json(self, **result: Any) -> None:
        raise _Exited(self._result(result))

    def fail_json(self, msg: str, **result: Any) -> None:
        raise _Exited(self._result({**result, "failed": True, "msg": msg}))


class ModuleOnController(NormalAction):
    """The action of every one of this collection's modules that talks to etcd, Ceph or
    libvirt (plugins/action/cluster_status.py, to which meta/runtime.yml routes the
    others): it runs the module the task names, whose `main(module_class)` builds its
    AnsibleModule from `module_class`."""

    @property
    def module_name(self) -> str:
        """The module's full name, however the task spelt it (short, with
        `collections:`, or through a redirect)."""
        return self._task.resolved_action or self._task.action

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        if not self._runs_here(task_vars):
            return super().run(tmp, task_vars)
        module = importlib.import_module(
            "ansible_collections.yasco.cluster.plugins.modules."
            + self.module_name.rsplit(".", 1)[-1])
        args = json.loads(json.dumps(self._task.args, default=str))
        module_class = functools.partial(ControllerModule, name=self.module_name, args=args,
                                         check_mode=bool(self._task.check_mode),
                                         diff=bool(self._task.diff))
        try:
            module.main(module_class)
        except _Exited as done:
            # What a module returns is data, never a template, wherever it ran.
            return wrap_var(done.result)
        return {"failed": True, "msg": f"{self.module_name} ended without a result"}

    def _runs_here(self, task_vars: dict[str, Any]) -> bool:
        """Whether this process can stand in for the module's own."""
        if not boolean(self._templar.template(task_vars.get(SWITCH, True)), strict=False):
            return False
        if (self._connection.transport != "local" or self._play_context.become
                or self._task.async_val or any(self._task.environment or [])):
            return False
        interpreter = task_vars.get("ansible_python_interpreter")
        if interpreter is None:
            return True
        interpreter = str(self._templar.template(interpreter))
        return interpreter.startswith("auto") or _same_python(interpreter, sys.executable)


def _same_python(one: str, other: str) -> bool:
    """The same Python with the same packages: one binary, in one directory (a
    virtualenv's python3 and python3.11 are one; the system's python3 is not it)."""
    return (os.path.dirname(os.path.abspath(one)) == os.path.dirname(os.path.abspath(other))
            and os.path.realpath(one) == os.path.realpath(other))
