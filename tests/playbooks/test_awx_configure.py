"""playbooks/awx_configure.yml, checked without an AWX or EDA controller: its awx.awx
tasks against the argument specs the installed awx.awx modules build, and its calls to
the EDA controller against eda-server's published OpenAPI document
(tests/data/eda_openapi_subset.json, README.md there says where it comes from).

Two readings of the playbook. As written: each awx.awx task's keys, required options,
choices and literal types, a template standing for any value of its option's type. As
rendered: every awx.awx task and every call to EDA turned into a debug task that prints
its arguments, run by ansible-playbook on a sample inventory, so that what AWX and EDA
would get is checked in full, types included. The controllers' own validation (which
needs the servers) is out of reach; the HA rulebook is checked by tests/test_rulebooks.py.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jinja2
import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_rulebook.util import render_string

from ansible_collections.awx.awx.plugins.module_utils.controller_api import ControllerModule
from ansible_collections.yasco.cluster.plugins.inventory import etcd as etcd_inventory
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    ALLOW_INSECURE)

from ..ansible_run import BIN, ROOT, run_playbook
from ..etcd import conftest as etcd_conftest
from ..etcd.conftest import ansible_env

PLAYBOOK = ROOT / "playbooks" / "awx_configure.yml"
RULEBOOK = ROOT / "rulebooks" / "ha_controller.yml"
OPENAPI = json.loads((ROOT / "tests" / "data" / "eda_openapi_subset.json").read_text())
AWX_GROUP = "group/awx.awx.controller"
# The real etcd servers of tests/etcd (TLS, and users), for the inventory source's test.
etcd_servers = etcd_conftest.fixture_etcd_servers
EDA_BASE = "https://eda.example.com/api/eda/v1"


class Unsafe(str):
    """A string under !unsafe: Ansible never renders it (an injector's template)."""


class Loader(yaml.SafeLoader):
    pass


class Dumper(yaml.SafeDumper):
    pass


Loader.add_constructor("!unsafe", lambda loader, node: Unsafe(loader.construct_scalar(node)))
Dumper.add_representer(
    Unsafe, lambda dumper, value: dumper.represent_scalar("!unsafe", str(value)))


def load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=Loader)


def is_template(value: Any) -> bool:
    return isinstance(value, str) and not isinstance(value, Unsafe) and "{{" in value


def module_of(task: dict[str, Any]) -> str:
    (module,) = [key for key in task if re.fullmatch(r"\w+\.\w+\.\w+", key)]
    return module


PLAYS = load(PLAYBOOK)
AWX_PLAY, EDA_PLAY = PLAYS


# --- awx.awx modules' argument specs ---------------------------------------------

class _Built(Exception):
    pass


@functools.cache
def awx_argument_spec(module: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The argument spec an awx.awx module builds in its main(), with the controller
    connection's options every one of them adds, and its constraints (mutually
    exclusive options and the like): taken from the module itself, not its docs."""
    name = module.removeprefix("awx.awx.")
    source = importlib.import_module(f"ansible_collections.awx.awx.plugins.modules.{name}")
    built: dict[str, Any] = {}

    class Capture:
        def __init__(self, argument_spec=None, **constraints):
            built.update(spec=argument_spec, constraints=constraints)
            raise _Built

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(source, "ControllerAPIModule", Capture)
        with pytest.raises(_Built):
            source.main()
    constraints = {key: value for key, value in built["constraints"].items()
                   if key in ("mutually_exclusive", "required_together", "required_one_of",
                              "required_if", "required_by")}
    return {**ControllerModule.AUTH_ARGSPEC, **built["spec"]}, constraints


STAND_INS = {"str": "x", "path": "/x", "raw": "x", "int": 1, "float": 1.0, "bool": True,
             "list": [], "dict": {}, "json": "{}", "jsonarg": "{}"}


def awx_errors(module: str, args: dict[str, Any], *, rendered: bool) -> list[str]:
    """What the module's own argument validation says of these arguments. Unless they
    are `rendered`, a template stands for a valid value of its option's type (its first
    choice when it has choices): only its key is checked."""
    spec, constraints = awx_argument_spec(module)
    names = {alias: name for name, option in spec.items()
             for alias in [name, *option.get("aliases", [])]}
    checked = {}
    for key, value in args.items():
        option = spec.get(names.get(key, key))
        if option is not None and not rendered and is_template(value):
            value = option["choices"][0] if option.get("choices") else STAND_INS[
                option.get("type", "str")]
        checked[key] = value
    return [str(error) for error in ArgumentSpecValidator(spec, **constraints).validate(
        checked).errors]


def awx_tasks() -> list[dict[str, Any]]:
    found = [task for play in PLAYS for task in play["tasks"]
             if module_of(task).startswith("awx.awx.")]
    assert found
    return found


def test_the_playbook_passes_ansible_playbooks_syntax_check():
    done = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check",
                           str(PLAYBOOK)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False,
                          env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_awx_task_takes_the_controller_connection_from_module_defaults():
    collection = Path(next(iter(importlib.import_module("ansible_collections.awx.awx").__path__)))
    runtime = yaml.safe_load((collection / "meta" / "runtime.yml").read_text())
    group = set(runtime["action_groups"]["controller"])
    for task in awx_tasks():
        assert module_of(task).removeprefix("awx.awx.") in group, task["name"]
        assert not set(task[module_of(task)]) & set(AWX_PLAY["module_defaults"][AWX_GROUP])
    assert {"controller_host", "controller_oauthtoken", "controller_password"} <= set(
        AWX_PLAY["module_defaults"][AWX_GROUP])


@pytest.mark.parametrize("task", awx_tasks(), ids=lambda task: task["name"])
def test_an_awx_task_as_written_fits_its_modules_argument_spec(task):
    args = {**AWX_PLAY["module_defaults"][AWX_GROUP], **task[module_of(task)]}
    assert awx_errors(module_of(task), args, rendered=False) == []


@pytest.mark.parametrize(("module", "args", "complaint"), [
    ("awx.awx.job_template", {"name": "x", "playbok": "playbooks/plan.yml"}, "playbok"),
    ("awx.awx.job_template", {"name": "x", "ask_variables_on_launch": "maybe"},
     "ask_variables_on_launch"),
    ("awx.awx.inventory", {"name": "{{ n }}"}, "organization"),
    ("awx.awx.credential_type", {"name": "x", "kind": "custom"}, "kind"),
    ("awx.awx.credential", {"name": "x", "credential_type": "Machine", "organization": "o",
                            "user": "u"}, "mutually exclusive"),
    ("awx.awx.inventory_source", {"name": "x", "inventory": "i", "source": "{{ s }}",
                                  "update_on_project_update": True},
     "update_on_project_update"),
])
def test_the_spec_check_refuses_what_the_module_would(module, args, complaint):
    errors = awx_errors(module, args, rendered=False)
    assert errors and complaint in " ".join(errors), errors


def test_a_template_is_checked_for_its_key_only():
    assert awx_errors("awx.awx.credential_type",
                      {"name": "x", "kind": "{{ k }}", "inputs": "{{ i }}"}, rendered=False) == []
    assert awx_errors("awx.awx.credential_type", {"name": "x", "inputs": "{{ i }}"},
                      rendered=True)


# --- the playbook rendered on a sample inventory ---------------------------------

def sample_inventory(directory: Path) -> dict[str, Any]:
    """The variables of a cluster's inventory (as docs/security.md lays them out) and
    the settings docs/awx.md asks for, with files holding stand-ins for PEMs and keyrings."""
    files = {}
    for name in ("etcd-ca.crt", "controller.crt", "controller.key", "reader.crt",
                 "reader.key", "watcher.crt", "watcher.key", "ceph.conf",
                 "ceph.client.yasco-provision.keyring", "ceph.client.yasco-fence.keyring"):
        files[name] = directory / name
        files[name].write_text(f"content of {name}\n")
    return {
        "yasco_cluster_name": "prod",
        "yasco_etcd_endpoints": ["https://etcd1.example.com:2379",
                                 "https://etcd2.example.com:2379"],
        "yasco_etcd_ca_cert": str(files["etcd-ca.crt"]),
        "yasco_etcd_client_cert": str(files["controller.crt"]),
        "yasco_etcd_client_key": str(files["controller.key"]),
        "yasco_etcd_username": "yasco-controller",
        "yasco_etcd_password": "controller-secret",
        "yasco_etcd_reader_client_cert": str(files["reader.crt"]),
        "yasco_etcd_reader_client_key": str(files["reader.key"]),
        "yasco_etcd_reader_username": "yasco-reader",
        "yasco_etcd_reader_password": "reader-secret",
        "yasco_etcd_watcher_client_cert": str(files["watcher.crt"]),
        "yasco_etcd_watcher_client_key": str(files["watcher.key"]),
        "yasco_etcd_watcher_username": "yasco-watcher",
        "yasco_etcd_watcher_password": "watcher-secret",
        "yasco_ceph_conf": str(files["ceph.conf"]),
        "yasco_ceph_client": "yasco-provision",
        "yasco_ceph_keyring": str(files["ceph.client.yasco-provision.keyring"]),
        "yasco_ceph_fence_client": "yasco-fence",
        "yasco_ceph_fence_keyring": str(files["ceph.client.yasco-fence.keyring"]),
        "yasco_awx_host": "https://awx.example.com",
        "yasco_awx_token": "awx-token",
        "yasco_awx_project_url": "https://git.example.com/ops/yasco.git",
        "yasco_awx_site_inventory": "inventories/prod",
        "yasco_awx_execution_environment": "registry.example.com/yasco-ee:0.1.0",
        "yasco_awx_ssh_private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\n...\n",
        "yasco_eda_host": "https://eda.example.com/",
        "yasco_eda_token": "eda-token",
        "yasco_eda_decision_environment": "registry.example.com/yasco-de:0.1.0",
        "yasco_eda_controller_token": "watcher-awx-token",
    }


# The ids the EDA play would have found or been given by the time of each call; no
# activation yet, so that it is created too.
EDA_IDS = {"organization": 1, "aap_credential_type": 2, "watcher_credential_type": 3,
           "controller_credential": 4, "watcher_credential": 5, "project": 6,
           "decision_environment": 7, "activation": None, "rulebook": 8}
KEPT = ("name", "loop", "loop_control", "when", "vars")


def printing(task: dict[str, Any]) -> dict[str, Any]:
    """The task as a debug task that prints its module and arguments, in its loop."""
    module = module_of(task)
    return {**{key: task[key] for key in KEPT if key in task},
            "ansible.builtin.debug": {"msg": {"module": module, "args": task[module]}}}


def absolute(play: dict[str, Any]) -> list[str]:
    return [str(PLAYBOOK.parent / path) for path in play["vars_files"]]


def drop_omitted(args: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in args.items()
            if not (isinstance(value, str) and value.startswith("__omit_place_holder__"))}


@pytest.fixture(name="rendered", scope="module")
def fixture_rendered(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """Every awx.awx task's arguments (with the controller connection merged in) and
    every call to EDA, as ansible-playbook renders them: {"awx": [...], "eda": [...]}."""
    directory = tmp_path_factory.mktemp("awx_configure")
    (directory / "inventory.yml").write_text(yaml.safe_dump(
        {"all": {"vars": sample_inventory(directory)}}))
    awx_play = {"name": "AWX", "hosts": "localhost", "gather_facts": False,
                "vars_files": absolute(AWX_PLAY),
                "tasks": [{"name": "controller", "ansible.builtin.debug": {
                    "msg": {"module": AWX_GROUP, "args": AWX_PLAY["module_defaults"][AWX_GROUP]}}}]
                + [printing(task) for task in AWX_PLAY["tasks"]
                   if module_of(task).startswith("awx.awx.")]}
    eda_play = {"name": "EDA", "hosts": "localhost", "gather_facts": False,
                "vars_files": absolute(EDA_PLAY),
                "vars": {**EDA_PLAY["vars"], "yasco_eda_ids": EDA_IDS, "eda_existing": []},
                "tasks": [printing(task) for task in EDA_PLAY["tasks"]
                          if module_of(task) == "ansible.builtin.uri"]}
    playbook = directory / "rendering.yml"
    playbook.write_text(yaml.dump([awx_play, eda_play], Dumper=Dumper, sort_keys=False))
    rc, results = run_playbook(playbook, str(directory / "inventory.yml"), "-c", "local")
    assert rc == 0, results
    printed = []
    for result in results:
        for item in result.get("results", [result]):
            if "msg" in item:
                printed.append(item["msg"])
    controller = drop_omitted(printed[0]["args"])
    return {"awx": [{"module": call["module"],
                     "args": {**controller, **drop_omitted(call["args"])}}
                    for call in printed[1:] if call["module"].startswith("awx.awx.")],
            "eda": [call["args"] for call in printed if call["module"] == "ansible.builtin.uri"]}


def calls_of(rendered, module: str) -> list[dict[str, Any]]:
    found = [call["args"] for call in rendered["awx"] if call["module"] == module]
    assert found, module
    return found


def test_every_awx_call_as_rendered_fits_its_modules_argument_spec(rendered):
    assert len({call["module"] for call in rendered["awx"]}) == len(
        {module_of(task) for task in awx_tasks()})
    for call in rendered["awx"]:
        assert awx_errors(call["module"], call["args"], rendered=True) == [], call


def test_the_job_templates_take_the_watchers_events_and_name_what_it_launches(rendered):
    templates = {args["name"]: args for args in calls_of(rendered, "awx.awx.job_template")}
    for template in templates.values():
        assert template["ask_variables_on_launch"] is True, template["name"]
        assert template["ask_limit_on_launch"] is True, template["name"]
        assert (ROOT / template["playbook"]).is_file(), template["playbook"]
    assert {"YASCO plan", "YASCO provision", "YASCO rebalance", "YASCO evacuate",
            "YASCO return home", "YASCO drain", "YASCO undrain", "YASCO status",
            "YASCO recover VM", "YASCO fence check", "YASCO notify"} <= set(templates)
    # The rulebook launches them by name and organization, which ansible-rulebook
    # renders with the activation's extra vars.
    (activation,) = [call["body"] for call in rendered["eda"]
                     if call["url"].endswith("/activations/") and call["method"] == "POST"]
    variables = yaml.safe_load(activation["extra_var"])
    (ruleset,) = yaml.safe_load(RULEBOOK.read_text())
    launched = [rule["action"]["run_job_template"] for rule in ruleset["rules"]
                if "run_job_template" in rule["action"]]
    # evacuate, recover VM, return home, drain, fence check, and notify three times
    # (etcd's alarms and quota, a VM its agent restarted in place)
    assert len(launched) == 8
    for launch in launched:
        name = render_string(launch["name"], variables)
        assert name in templates, name
        assert render_string(launch["organization"], variables) == templates[name][
            "organization"]


def test_each_job_template_gets_the_credentials_its_playbook_needs(rendered):
    created = {args["name"]: args["credential_type"]
               for args in calls_of(rendered, "awx.awx.credential")}
    templates = {args["name"]: args for args in calls_of(rendered, "awx.awx.job_template")}
    for template in templates.values():
        types = [created[name] for name in template["credentials"]]
        assert len(types) == len(set(types)), template["name"]  # one of each type
    assert [created[name] for name in templates["YASCO evacuate"]["credentials"]] == [
        "Machine", "YASCO etcd", "YASCO Ceph"]
    # status reads as the read-only user, the others as the controller.
    assert "YASCO etcd reader" in templates["YASCO status"]["credentials"]
    assert "YASCO etcd controller" not in templates["YASCO status"]["credentials"]


def injector_names(template: str) -> set[str]:
    return set(re.findall(r"{{\s*([\w.]+)\s*}}", template))


def test_the_credential_types_inject_what_the_playbooks_read_from_their_inputs(rendered):
    types = {args["name"]: args for args in calls_of(rendered, "awx.awx.credential_type")}
    cluster_vars = (ROOT / "playbooks" / "vars" / "cluster.yml").read_text()
    for ctype in types.values():
        fields = {field["id"] for field in ctype["inputs"]["fields"]}
        assert set(ctype["inputs"]["required"]) <= fields
        files = {key.removeprefix("template.") for key in ctype["injectors"]["file"]}
        for template in [*ctype["injectors"]["file"].values(),
                         *ctype["injectors"]["extra_vars"].values(),
                         *ctype["injectors"].get("env", {}).values()]:
            # Left for AWX to render: only the inputs and the files it writes.
            for name in injector_names(template):
                assert name in fields or name.removeprefix("tower.filename.") in files, name
        for variable in ctype["injectors"]["extra_vars"]:
            assert re.search(rf"\b{variable}\b", cluster_vars), variable
    for credential in calls_of(rendered, "awx.awx.credential"):
        if credential["credential_type"] in types:
            inputs = types[credential["credential_type"]]["inputs"]
            assert set(credential["inputs"]) == {field["id"] for field in inputs["fields"]}
            assert all(credential["inputs"].values()), credential["name"]
    assert types["YASCO etcd"]["injectors"]["extra_vars"]["yasco_etcd_password"] == \
        "{{ password }}"


def test_the_etcd_inventory_source_is_a_file_the_plugin_accepts(rendered):
    sources = {args["name"]: args for args in calls_of(rendered, "awx.awx.inventory_source")}
    etcd = sources["YASCO etcd"]
    path = ROOT / etcd["source_path"]
    assert etcd["source"] == "scm" and path.is_file()
    assert etcd_inventory.InventoryModule().verify_file(str(path))
    assert yaml.safe_load(path.read_text())["plugin"] == "yasco.cluster.etcd"
    # An SCM source's variables are its environment: what the plugin's endpoints read.
    assert etcd["source_vars"] == {
        "YASCO_ETCD_ENDPOINTS": "https://etcd1.example.com:2379,https://etcd2.example.com:2379"}
    assert etcd["credential"] == "YASCO etcd reader"
    assert sources["YASCO site"]["source_path"] == "inventories/prod"
    assert not etcd_inventory.InventoryModule().verify_file(str(ROOT / "inventories/awx"))


def injected(ctype: dict[str, Any], inputs: dict[str, str], directory: Path) -> dict[str, str]:
    """The environment AWX gives a job or an inventory update from a credential of this
    type: its file templates written, {{ tower.filename.NAME }} naming them."""
    filenames = {}
    for key, template in ctype["injectors"]["file"].items():
        name = key.removeprefix("template.")
        filenames[name] = directory / name
        filenames[name].write_text(jinja2.Template(template).render(inputs))
    context = {**inputs, "tower": {"filename": {k: str(v) for k, v in filenames.items()}}}
    return {name: jinja2.Template(template).render(context)
            for name, template in ctype["injectors"]["env"].items()}


@pytest.mark.parametrize("server", ["tls", "auth"])
def test_the_etcd_inventory_source_lists_the_cluster_with_what_its_credential_injects(
        rendered, etcd_servers, server, tmp_path, monkeypatch):
    """The etcd source as AWX runs it: ansible-inventory on the project's file, with the
    source's variables and the reader credential's injectors as its environment,
    against a real etcd: one that checks the files (TLS with a client certificate; it
    has no users, so the user's inputs are left empty here), one that checks the user
    (plain HTTP, so the files it is given are not used)."""
    etcd = etcd_servers[server]
    # Neither has both TLS and users: the lab-only switch, which ansible_env passes on.
    monkeypatch.setenv(ALLOW_INSECURE, "1")
    (source,) = [args for args in calls_of(rendered, "awx.awx.inventory_source")
                 if args["name"] == "YASCO etcd"]
    (ctype,) = [args for args in calls_of(rendered, "awx.awx.credential_type")
                if args["name"] == "YASCO etcd"]
    username = next(iter(etcd.credentials), "")
    inputs = {"ca_cert": Path(etcd.ca_cert).read_text() if etcd.ca_cert else "",
              "client_cert": Path(etcd.client_cert).read_text() if etcd.client_cert else "",
              "client_key": Path(etcd.client_key).read_text() if etcd.client_key else "",
              "username": username, "password": etcd.credentials.get(username, "")}
    writer = etcd.client()
    writer.put_json(etcd_keys.registered_key("hv1"), {"address": "10.0.0.1"})
    writer.put_json(etcd_keys.alive_key("hv1"), {"address": "10.0.0.1"})
    writer.put_json(etcd_keys.registered_key("hv2"), {"address": "10.0.0.2"})
    try:
        # The source's variables name the endpoints: this etcd's, here.
        assert set(source["source_vars"]) == {"YASCO_ETCD_ENDPOINTS"}
        env = {**injected(ctype, inputs, tmp_path), "YASCO_ETCD_ENDPOINTS": etcd.url}
        done = subprocess.run([str(BIN / "ansible-inventory"), "-i",
                               str(ROOT / source["source_path"]), "--list"], cwd=ROOT,
                              env=ansible_env(ANSIBLE_INVENTORY_UNPARSED_FAILED="true", **env),
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        writer.delete_prefix(etcd_keys.hosts_prefix())
    assert done.returncode == 0, done.stdout + done.stderr
    listing = json.loads(done.stdout)
    assert sorted(listing["yasco_hypervisors_alive"]["hosts"]) == ["hv1"]
    assert sorted(listing["yasco_hypervisors_failed"]["hosts"]) == ["hv2"]
    assert listing["_meta"]["hostvars"]["hv2"]["ansible_host"] in ("10.0.0.2", {
        "__ansible_unsafe": "10.0.0.2"})


# --- the EDA controller's API ----------------------------------------------------

def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema or "allOf" in schema:
        if "allOf" in schema:
            (schema,) = schema["allOf"]
        ref = schema.get("$ref")
        if ref:
            schema = OPENAPI["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return schema


def type_errors(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    schema = resolve(schema)
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} not in {schema['enum']}"]
    expected = {"string": str, "integer": int, "boolean": bool, "array": list,
                "object": dict}[schema.get("type", "object")]
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        return [f"{where}: {value!r} is no {schema.get('type')}"]
    if expected is list:
        return [error for index, element in enumerate(value)
                for error in type_errors(element, schema["items"], f"{where}[{index}]")]
    return []


def api_errors(method: str, url: str, body: dict[str, Any] | None) -> list[str]:
    """What eda-server's published API says of this call."""
    parts = urlsplit(url)
    assert url.startswith(EDA_BASE), url
    path = parts.path.removeprefix(urlsplit(EDA_BASE).path)
    operation = OPENAPI["paths"].get(path, {}).get(method.lower())
    if operation is None:
        return [f"no {method} {path}"]
    errors = []
    parameters = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}
    for name, value in parse_qsl(parts.query):
        if name not in parameters:
            errors.append(f"{method} {path}: no query parameter {name}")
        elif parameters[name]["schema"]["type"] in ("integer", "number") and not value.isdigit():
            errors.append(f"{method} {path}: {name}={value} is no number")
    if body is None:
        return errors + ([f"{method} {path} needs a body"] if "requestBody" in operation else [])
    request = resolve(operation["requestBody"]["content"]["application/json"]["schema"])
    for key, value in body.items():
        if key not in request["properties"]:
            errors.append(f"{method} {path}: no property {key}")
        else:
            errors += type_errors(value, request["properties"][key], f"{method} {path} {key}")
    errors += [f"{method} {path}: {key} required" for key in request.get("required", [])
               if key not in body]
    return errors


def test_every_eda_call_fits_the_published_api(rendered):
    assert len(rendered["eda"]) >= len(EDA_IDS)
    for call in rendered["eda"]:
        assert api_errors(call["method"], call["url"], call.get("body")) == [], call


@pytest.mark.parametrize(("method", "url", "body", "complaint"), [
    ("GET", f"{EDA_BASE}/activation/?name=x", None, "no GET /activation/"),
    ("DELETE", f"{EDA_BASE}/projects/", None, "no DELETE"),
    ("GET", f"{EDA_BASE}/rulebooks/?name=x&project=6", None, "no query parameter project"),
    ("GET", f"{EDA_BASE}/rulebooks/?project_id=HA", None, "is no number"),
    ("POST", f"{EDA_BASE}/projects/", {"name": "x"}, "url required"),
    ("POST", f"{EDA_BASE}/projects/", {"name": "x", "url": "u", "branch": "main"},
     "no property branch"),
    ("POST", f"{EDA_BASE}/activations/", {"name": "x", "rulebook_id": "8",
                                          "decision_environment_id": 7}, "is no integer"),
    ("POST", f"{EDA_BASE}/activations/", {"name": "x", "rulebook_id": 8,
                                          "decision_environment_id": 7,
                                          "restart_policy": "sometimes"}, "not in"),
])
def test_the_api_check_refuses_what_eda_would(method, url, body, complaint):
    errors = api_errors(method, url, body)
    assert errors and complaint in " ".join(errors), errors


def test_every_object_is_found_by_name_before_it_is_created(rendered):
    looked_up = {urlsplit(call["url"]).path.removeprefix(urlsplit(EDA_BASE).path)
                 for call in rendered["eda"] if call["method"] == "GET"}
    created = [call for call in rendered["eda"] if call["method"] == "POST"]
    assert len(created) == 6
    for call in created:
        path = urlsplit(call["url"]).path.removeprefix(urlsplit(EDA_BASE).path)
        assert path in looked_up, path
        names = [dict(parse_qsl(urlsplit(lookup["url"]).query))["name"]
                 for lookup in rendered["eda"] if lookup["method"] == "GET"
                 and urlsplit(lookup["url"]).path.endswith(path)]
        assert call["body"]["name"] in names, call["body"]["name"]


def test_eda_gets_the_organization_and_the_credentials_it_requires(rendered):
    posted = {urlsplit(call["url"]).path.rsplit("/", 2)[-2] + ":" + call["body"]["name"]:
              call["body"] for call in rendered["eda"] if call["method"] == "POST"}
    for key, body in posted.items():
        # Later eda-server releases require it (tests/data/README.md).
        if not key.startswith("credential-types:"):
            assert body["organization_id"] == EDA_IDS["organization"], key
    activation = posted["activations:YASCO HA"]
    assert activation["eda_credentials"] == [EDA_IDS["controller_credential"],
                                             EDA_IDS["watcher_credential"]]
    assert activation["rulebook_id"] == EDA_IDS["rulebook"] and activation["is_enabled"]
    controller = posted["eda-credentials:YASCO controller"]
    assert controller["credential_type_id"] == EDA_IDS["aap_credential_type"]
    assert controller["inputs"] == {"host": "https://awx.example.com", "verify_ssl": True,
                                    "oauth_token": "watcher-awx-token"}


def test_the_watchers_password_reaches_the_activation_only_through_its_credential(rendered):
    posted = {call["body"]["name"]: call["body"] for call in rendered["eda"]
              if call["method"] == "POST" and "/credential-types/" not in call["url"]}
    ctype = next(call["body"] for call in rendered["eda"]
                 if call["method"] == "POST" and "/credential-types/" in call["url"])
    variables = yaml.safe_load(posted["YASCO HA"]["extra_var"])
    assert "watcher-secret" not in posted["YASCO HA"]["extra_var"]
    assert variables["yasco_etcd_endpoints"] == ["https://etcd1.example.com:2379",
                                                 "https://etcd2.example.com:2379"]
    assert variables["yasco_cluster_name"] == "prod"
    fields = {field["id"]: field for field in ctype["inputs"]["fields"]}
    assert fields["password"]["secret"] and fields["client_key"]["secret"]
    assert posted["YASCO etcd watcher"]["inputs"]["password"] == "watcher-secret"
    assert posted["YASCO etcd watcher"]["inputs"]["client_cert"] == "content of watcher.crt\n"
    # What the rulebook reads of the watcher's: its user as extra vars (which EDA
    # vault-encrypts), its files through the environment.
    rulebook = RULEBOOK.read_text()
    for variable, template in ctype["injectors"]["extra_vars"].items():
        assert f"{variable} |" in rulebook, variable
        assert injector_names(template) <= set(fields)
        assert variable not in variables
    files = {key.removeprefix("template.") for key in ctype["injectors"]["file"]}
    for template in ctype["injectors"]["env"].values():
        (name,) = injector_names(template)
        assert name.removeprefix("eda.filename.") in files, name
