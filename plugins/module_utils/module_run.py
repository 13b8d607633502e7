# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The few lines every module's main() shares: a missing binding is named, an
adapter's error becomes the task's message, and a run's result is returned."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib


def run_module(module: AnsibleModule, run_class: Any, error_class: type[Exception],
               requirements: dict[str, str | None]) -> None:
    """Run `run_class(params, check_mode).run()` and exit with its result, once every
    library of `requirements` (its name -> the traceback of its failed import, or
    None) is there."""
    for requirement, import_error in requirements.items():
        if import_error:
            module.fail_json(msg=missing_required_lib(requirement), exception=import_error)
    try:
        result = run_class(module.params, module.check_mode).run()
    except error_class as err:
        module.fail_json(msg=str(err))
    module.exit_json(**result)
