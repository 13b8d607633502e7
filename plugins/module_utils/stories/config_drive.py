# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NoCloud config drives for cloud-init, kept in RBD so a VM finds its drive on
whichever host it starts.

A drive is an ISO 9660 image labelled `cidata` holding `user-data`, `meta-data` and
optionally `network-config`, which cloud-init reads with no metadata server. The ISO
embeds its creation time, so two builds of the same content differ byte for byte;
the image's metadata records a digest of the content instead, which is what makes a
rerun a no-change.
"""

from __future__ import annotations

import hashlib
import io
import json
import traceback
from typing import Any

try:
    import yaml
except ImportError:
    yaml = None

try:
    import pycdlib
except ImportError:
    pycdlib = None
    PYCDLIB_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    PYCDLIB_IMPORT_ERROR = None

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CephRun

DIGEST_KEY = "yasco.cidata.sha256"
_MIB = 1024 * 1024


def _text(value: Any, header: str = "") -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return header + yaml.safe_dump(value, default_flow_style=False, sort_keys=True)


def drive_files(user_data: Any, meta_data: Any, network_config: Any) -> dict[str, bytes]:
    """The drive's files: mappings become YAML (user data as #cloud-config)."""
    files = {"user-data": _text(user_data, "#cloud-config\n"),
             "meta-data": _text(meta_data)}
    if network_config is not None:
        files["network-config"] = _text(network_config)
    return {name: text.encode() for name, text in files.items()}


def digest(files: dict[str, bytes]) -> str:
    return hashlib.sha256(json.dumps({k: v.decode() for k, v in sorted(files.items())},
                                     sort_keys=True).encode()).hexdigest()


def build_iso(files: dict[str, bytes]) -> bytes:
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
    for index, (name, data) in enumerate(sorted(files.items())):
        iso.add_fp(io.BytesIO(data), len(data), f"/FILE{index};1", rr_name=name,
                   joliet_path=f"/{name}")
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    return out.getvalue()


def read_iso(data: bytes) -> dict[str, bytes]:
    """The files of a drive, by their Rock Ridge names (for checks and tests)."""
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(data))
    files = {}
    for child in iso.list_children(rr_path="/"):
        name = child.rock_ridge.name().decode() if child.rock_ridge else ""
        if name in ("", ".", ".."):
            continue
        out = io.BytesIO()
        iso.get_file_from_iso_fp(out, rr_path=f"/{name}")
        files[name] = out.getvalue()
    iso.close()
    return files


class DriveRun(CephRun):
    """One run of the config_drive module."""

    def run(self) -> dict[str, Any]:
        p = self.params
        with self.connected() as cluster, \
                cluster.opened(p["pool"], p["name"], "config drive") as (ioctx, image):
            current = None
            if image is not None:
                try:
                    current = image.metadata_get(DIGEST_KEY)
                except (KeyError, ceph.rbd.ObjectNotFound):  # not ours, or half written
                    current = "unknown"
            if p["state"] == "absent":
                if image is not None:
                    image.close()
                    if not self.check_mode:
                        ceph.rbd.RBD().remove(ioctx, p["name"])
                return {"changed": image is not None, "sha256": None}
            files = drive_files(p["user_data"], p["meta_data"], p["network_config"])
            wanted = digest(files)
            if current == wanted:
                return {"changed": False, "sha256": wanted}
            if not self.check_mode:
                self._write(ioctx, image, p["name"], build_iso(files), wanted)
            return {"changed": True, "sha256": wanted,
                    "diff": {"before": current or "", "after": wanted}}

    @staticmethod
    def _write(ioctx, image, name: str, iso: bytes, wanted: str) -> None:
        size = max(_MIB, -(-len(iso) // _MIB) * _MIB)
        if image is None:
            ceph.rbd.RBD().create(ioctx, name, size, old_format=False)
            image = ceph.rbd.Image(ioctx, name)
        try:
            # The digest goes last: a drive cut short by a crash is rewritten next run.
            try:
                image.metadata_remove(DIGEST_KEY)
            except (KeyError, ceph.rbd.ObjectNotFound):
                pass
            if image.size() != size:
                image.resize(size, allow_shrink=True)
            image.write(iso + bytes(size - len(iso)), 0)
            image.flush()
            image.metadata_set(DIGEST_KEY, wanted)
        finally:
            image.close()
