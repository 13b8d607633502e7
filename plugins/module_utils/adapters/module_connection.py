# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module's main() from the connections it takes.

A connection (Ceph's in ceph_module.py, libvirt's in libvirt_module.py) is what every
module that reaches that service shares: its options, documented by the doc fragment
of the same name, the error its adapter raises and the libraries it needs. A module
names the connections it takes, its own options and the class that does its work;
`Connection.module` builds the task's module and `Connection.run` runs it through
module_run.run_module, so a missing library and an adapter's error reach the task
alike in each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import (
    BatchModule, run_module)


@dataclass(frozen=True)
class Connection:
    """The options of a connection, the errors its adapter raises, and the libraries
    it needs (a name -> the traceback of its failed import, or None). `a + b` is a
    module that takes both."""

    options: dict[str, dict[str, Any]]
    errors: tuple[type[Exception], ...]
    requirements: dict[str, str | None]

    def __add__(self, other: Connection) -> Connection:
        return Connection({**self.options, **other.options}, self.errors + other.errors,
                          {**self.requirements, **other.requirements})

    def module(self, module_class: Callable[..., Any], options: dict[str, dict[str, Any]],
               *, batch: str | None = None, **rules: Any) -> Any:
        """The task's module, with the connection's options and `options`, supporting
        check mode: built by `module_class` (AnsibleModule, or what stands in for it on
        the controller), or with `batch` a BatchModule whose items are the elements of
        that option. `rules` are AnsibleModule's (required_if, mutually_exclusive...)."""
        argument_spec = {**self.options, **options}
        if batch:
            return BatchModule(argument_spec, option=batch, module_class=module_class,
                               **rules)
        return module_class(argument_spec=argument_spec, supports_check_mode=True, **rules)

    def run(self, module: Any, run_class: Any, *errors: type[Exception],
            requirements: dict[str, str | None] | None = None) -> None:
        """Run `run_class` (module_run.run_module) and exit: the connection's errors and
        `errors` fail the task with their message, and its libraries and
        `requirements` must be there."""
        run_module(module, run_class, self.errors + errors,
                   {**self.requirements, **(requirements or {})})
