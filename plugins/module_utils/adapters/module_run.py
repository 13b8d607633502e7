# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module's main() shares: a missing binding is named, an adapter's error
becomes the task's message, a run's result is returned; and the batch form, where
one task does the same for a list of items. Each module hands `run_module` a run
class, its adapter's error class and the libraries it needs; etcd's modules, whose
work is a function of a connected client, make theirs with etcd_module.etcd_run.

A `Connection` (Ceph's in ceph_module.py, libvirt's in libvirt_module.py) is what every
module that reaches one service shares: its options, documented by the doc fragment
of the same name, the error its adapter raises and the libraries it needs. A module
names the connections it takes, its own options and its run class;
`Connection.module` builds the task's module and `Connection.run` runs it through
`run_module`.

A batch exists because each task a loop runs starts Python, imports the bindings and
connects again: provisioning ten VMs on a host as ten loop items costs ten times
that, as one batch once. Each element is validated exactly as the single form's
options are, so the batch accepts and refuses the same things. A module whose items
are independent of each other (domains) may also offer `keep_going` and `parallel`
(INDEPENDENT_SPEC): every item tried even when one fails, and several run at once,
each worker with its own session (connection).
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator


class ReadOnlyRun:
    """The run of a module that only reads (an _info module): the same in check mode.
    A subclass reads `self.params` in its `run()`."""

    def __init__(self, params: dict[str, Any], check_mode: bool) -> None:
        del check_mode  # reading is the same either way
        self.params = params


class BatchModule:
    """An AnsibleModule whose options describe one item, identified by `key`, or,
    with `option`, several: each element of `option` takes the same options, and
    what it leaves out comes from the task's own. `key` is given either for the task
    or per element, unless `shared_key`: then the task's is every element's default.
    `module_class` builds the task's module: AnsibleModule, or what stands in for it
    on the controller (plugin_utils/controller_module.py)."""

    def __init__(self, argument_spec: dict[str, Any], option: str, key: str = "name",
                 shared_key: bool = False, independent: bool = False,
                 module_class: Callable[..., Any] = AnsibleModule, **rules: Any) -> None:
        self.option, self.key = option, key
        # The task's own options, which no item takes.
        self.task_options = {option, *(INDEPENDENT_SPEC if independent else ())}
        # The rules (required_if, mutually_exclusive, ...) belong to each item, so
        # they are checked per item below, not on the task's options.
        self.validator = ArgumentSpecValidator(argument_spec, **rules)
        spec = {**argument_spec, key: {**argument_spec[key], "required": False},
                # An item list holds no secret of its own (each item's options keep
                # their no_log), but a name such as "keys" makes Ansible ask.
                option: {"type": "list", "elements": "dict", "no_log": False},
                **(INDEPENDENT_SPEC if independent else {})}
        exclusive = [] if shared_key else [[key, option]]
        self.module = module_class(argument_spec=spec, supports_check_mode=True,
                                   mutually_exclusive=exclusive,
                                   required_one_of=[[key, option]])

    @property
    def batch(self) -> bool:
        return self.module.params[self.option] is not None

    def workers(self) -> int:
        """How many items run at once: `parallel`, for a batch that takes it."""
        parallel = self.module.params.get("parallel", 1)
        if parallel < 1:
            self.module.fail_json(msg=f"parallel: must be 1 or more, got {parallel}")
        return parallel if self.batch else 1

    def items(self) -> list[dict[str, Any]]:
        """Each item's options, validated; fails the task naming the first bad one."""
        shared = {k: v for k, v in _set_only(self.module.params).items()
                  if k not in self.task_options}
        if not self.batch:
            return [self._validated(shared, "")]
        items = []
        for index, element in enumerate(self.module.params[self.option]):
            where = f"{self.option}[{index}]"
            if isinstance(element, dict) and element.get(self.key):
                where += f" ({element[self.key]})"
            if not isinstance(element, dict):
                self.module.fail_json(msg=f"{where}: expected a mapping of options")
            if self.option in element:
                self.module.fail_json(msg=f"{where}: {self.option} cannot be nested")
            items.append(self._validated({**shared, **element}, where))
        return items

    def _validated(self, params: dict[str, Any], where: str) -> dict[str, Any]:
        result = self.validator.validate(params)
        if result.error_messages:
            problems = "; ".join(result.error_messages)
            self.module.fail_json(msg=f"{where}: {problems}" if where else problems)
        return result.validated_parameters

    def run(self, run_one: Callable[[dict[str, Any]], dict[str, Any]],
            error_class: type[Exception] | tuple[type[Exception], ...],
            items: list[dict[str, Any]] | None = None) -> None:
        """Run `run_one(item)` for each item and exit: the single form with its own
        result; a batch with RV(results) (one per item, in order, each with the
        item's key), RV(changed) when any changed, and the items' diffs as a list.
        The first failure stops the batch (items already running finish); the result
        names the item and carries what was done. With `keep_going`, every item is
        tried, and the task then fails naming each failed item, whose entry in
        RV(results) has `failed` and `msg`."""
        items = self.items() if items is None else items
        workers = self.workers()  # refuses a bad `parallel` before anything is done
        outcomes = self._outcomes(run_one, error_class, items, workers)
        if not self.batch:
            result = outcomes[0]
            if isinstance(result, error_class):
                self.module.fail_json(msg=str(result), **{**getattr(result, "details", {}),
                                                          self.key: items[0][self.key]})
            if not self.module._diff:
                result.pop("diff", None)
            self.module.exit_json(**result)
        # Each item's result, or its error as a failed one, named; None if not tried.
        results = [None if r is None else {
            **({"failed": True, "msg": str(r), **getattr(r, "details", {})}
               if isinstance(r, error_class) else r), self.key: item[self.key]}
            for item, r in zip(items, outcomes)]
        failures = [(item, err) for item, err in zip(items, outcomes)
                    if isinstance(err, error_class)]
        if failures and not self.module.params.get("keep_going"):
            item, err = failures[0]
            self.module.fail_json(msg=f"{self.key} {item[self.key]}: {err}",
                                  results=[r for r in results if r and not r.get("failed")],
                                  **{**getattr(err, "details", {}), self.key: item[self.key]})
        if failures:
            self.module.fail_json(
                msg="; ".join(f"{self.key} {item[self.key]}: {err}" for item, err in failures),
                results=results)
        diffs = []
        for item, result in zip(items, results):
            diff = result.pop("diff", None)
            if result.get("changed") and diff:
                diffs.append({"before_header": str(item[self.key]),
                              "after_header": str(item[self.key]), **diff})
        summary: dict[str, Any] = {"changed": any(r.get("changed") for r in results),
                                   "results": results}
        if self.module._diff:
            summary["diff"] = diffs
        self.module.exit_json(**summary)

    def _outcomes(self, run_one: Callable[[dict[str, Any]], dict[str, Any]],
                  error_class: type[Exception] | tuple[type[Exception], ...],
                  items: list[dict[str, Any]], workers: int) -> list[Any]:
        """Each item's result or error, in the items' order, `workers` at a time,
        started in that order. Without `keep_going`, no item starts after one has
        failed (None for those)."""
        outcomes: list[Any] = [None] * len(items)
        failed = threading.Event()
        keep_going = self.module.params.get("keep_going")

        def attempt(index: int) -> None:
            if failed.is_set() and not keep_going:
                return
            try:
                outcomes[index] = run_one(items[index])
            except error_class as err:
                outcomes[index] = err
                failed.set()

        if workers == 1:
            for index in range(len(items)):
                attempt(index)
        else:
            with ThreadPoolExecutor(workers) as pool:
                for finished in [pool.submit(attempt, i) for i in range(len(items))]:
                    finished.result()  # re-raises what is not an adapter error
        return outcomes


# The task options of a batch whose items are independent of each other
# (BatchModule(independent=True)): go on past a failed item; run several at once.
INDEPENDENT_SPEC: dict[str, Any] = {"keep_going": {"type": "bool", "default": False},
                                    "parallel": {"type": "int", "default": 1}}


def _set_only(value: Any) -> Any:
    """Validated options without the ones left unset (None), at every depth: what
    validating again accepts exactly as it accepted the first time (an unset option
    still counts for mutually_exclusive, and fails its choices)."""
    if isinstance(value, dict):
        return {k: _set_only(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_set_only(v) for v in value]
    return value


def check_requirements(module: AnsibleModule, requirements: dict[str, str | None],
                       **context: Any) -> None:
    """Fail naming the first library of `requirements` (its name -> the traceback of
    its failed import, or None) that is missing; `context` goes into the result."""
    for requirement, import_error in requirements.items():
        if import_error:
            module.fail_json(msg=missing_required_lib(requirement), exception=import_error,
                             **context)


class _WorkerSessions:
    """One session per worker thread, opened when the worker first needs it (or, with
    `first`, the calling thread's on entering) and all closed together. Workers never
    share one: libvirt's remote client can hang for good when two threads call through
    the same connection."""

    def __init__(self, factory: Callable[[dict[str, Any]], Any], params: dict[str, Any],
                 first: bool = False):
        self.factory, self.params, self.first = factory, params, first
        self.local = threading.local()
        self.lock = threading.Lock()
        self.stack = contextlib.ExitStack()

    def mine(self) -> Any:
        if not hasattr(self.local, "session"):
            session = self.factory(self.params)
            with self.lock:
                self.local.session = self.stack.enter_context(session)
        return self.local.session

    def __enter__(self) -> _WorkerSessions:
        if self.first:
            self.mine()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def run_module(module: AnsibleModule | BatchModule, run_class: Any,
               error_class: type[Exception] | tuple[type[Exception], ...],
               requirements: dict[str, str | None], *,
               items: list[dict[str, Any]] | None = None, **context: Any) -> None:
    """Run `run_class(params, check_mode).run()` and exit with its result, once every
    library of `requirements` is there. An `error_class` error fails the task with its
    message and its `details`, if it has any; `context` goes into every failure's
    result. A BatchModule runs it per item (its `items()`, unless given), the items a
    worker runs sharing one `run_class.session(params)` (a connection), opened when
    the worker first needs it, or before any item runs when the run class has
    `session_first`: then options the session refuses fail the task, not an item."""
    if isinstance(module, BatchModule):
        check_requirements(module.module, requirements, **context)
        check_mode = module.module.check_mode
        items = module.items() if items is None else items
        try:
            with _WorkerSessions(run_class.session, module.module.params,
                                 getattr(run_class, "session_first", False)) as sessions:
                module.run(lambda item: run_class(item, check_mode, sessions.mine()).run(),
                           error_class, items)
        except error_class as err:  # opening the first session, or closing one
            module.module.fail_json(msg=str(err), **context, **getattr(err, "details", {}))
        return
    check_requirements(module, requirements, **context)
    try:
        result = run_class(module.params, module.check_mode).run()
    except error_class as err:
        module.fail_json(msg=str(err), **context, **getattr(err, "details", {}))
    module.exit_json(**result)


def no_session(params: dict[str, Any]) -> contextlib.AbstractContextManager:
    """For run classes that open what they need themselves."""
    del params
    return contextlib.nullcontext()


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
