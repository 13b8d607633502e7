"""The changelog: every fragment passes antsibull-changelog's lint, and
changelogs/changelog.yaml and CHANGELOG.md are what antsibull-changelog makes of the
fragments and plugins as they are now (changelogs/README.md says how to add a change)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def antsibull_changelog(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "antsibull-changelog"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


def changelogs_copy(tmp_path: Path) -> Path:
    """galaxy.yml and changelogs/ alone, which is all lint and generate read."""
    shutil.copy2(REPO / "galaxy.yml", tmp_path)
    shutil.copytree(REPO / "changelogs", tmp_path / "changelogs",
                    ignore=shutil.ignore_patterns(".plugin-cache.yaml"))
    return tmp_path


def collection_copy(tmp_path: Path) -> Path:
    """The whole collection, copied the way ansible-test gets it."""
    spec = importlib.util.spec_from_file_location("ansible_test_script",
                                                  REPO / "scripts" / "ansible_test.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.collection_tree(tmp_path)


def test_every_fragment_passes_lint():
    done = antsibull_changelog("lint", cwd=REPO)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def test_lint_names_a_fragment_with_an_unknown_section_or_broken_markup(tmp_path):
    root = changelogs_copy(tmp_path)
    (root / "changelogs" / "fragments" / "broken.yml").write_text(
        "new_features:\n  - A section antsibull-changelog does not know.\n"
        "minor_changes:\n  - An ``unclosed literal.\n")
    done = antsibull_changelog("lint", cwd=root)
    assert done.returncode != 0
    assert "changelogs/fragments/broken.yml:0:0: invalid section: new_features" in done.stdout
    assert "Inline literal start-string without end-string" in done.stdout


def test_changelog_md_is_generated_from_changelog_yaml(tmp_path):
    root = changelogs_copy(tmp_path)
    done = antsibull_changelog("generate", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "CHANGELOG.md").read_text() == (REPO / "CHANGELOG.md").read_text(), (
        "CHANGELOG.md is out of date: run `antsibull-changelog generate`")


def test_the_release_already_holds_every_fragment_and_new_plugin(tmp_path):
    """Releasing galaxy.yml's version again, with the fragments re-read, changes nothing:
    no fragment, edit or new plugin is waiting for `antsibull-changelog release`."""
    root = collection_copy(tmp_path)
    done = antsibull_changelog("release", "--refresh-fragments", "without-archives",
                               "--ansible-doc-bin", str(BIN / "ansible-doc"), cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("changelogs/changelog.yaml", "CHANGELOG.md"):
        assert (root / name).read_text() == (REPO / name).read_text(), (
            f"{name} is out of date: run `antsibull-changelog release` "
            "(changelogs/README.md)")
