"""`leap restore` opens no door: a backup edited by anyone who can write to the backup store
(a link out of the folder, an absolute link, a folder opened to others or made setuid, an entry
beneath a link) is refused before anything is written, and nothing outside the new folder
changes; a restored folder is built at 0700 with files created 0600; `--without-secrets` leaves
the install's keys out."""

import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from leap_pipeline.app.backup import MANIFEST, BackupError, backup
from leap_pipeline.app.restore import restore


def _install(data: Path) -> Path:
    """A small data folder as an install keeps it: records naming the folder, a night's
    folder behind a relative link, secrets at 0600 in a 0700 folder."""
    (data / "records" / "cascade_model" / "2026-01-02").mkdir(parents=True)
    (data / "records" / "cascade_model" / "2026-01-02" / "run.json").write_text(
        json.dumps({"record": {"folder": str(data / "models" / "night-1")}})
    )
    (data / "models" / "night-1").mkdir(parents=True)
    (data / "models" / "night-1" / "night.json").write_text("{}")
    (data / "models" / "latest").symlink_to("night-1")
    (data / "secrets").mkdir(mode=0o700)
    (data / "secrets" / "postgres-password").write_text("s3cret\n")
    (data / "secrets" / "postgres-password").chmod(0o600)
    (data / "leap.toml").write_text("# calendar\n")
    return data


def _fingerprint(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder``: its content's sha256 (or link target), mode and owner."""
    found = {}
    for path in sorted([folder, *folder.rglob("*")]):
        info = path.lstat()
        if path.is_symlink():
            body = os.readlink(path)
        elif path.is_file():
            body = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            body = "dir"
        found[str(path)] = (body, info.st_mode, info.st_uid, info.st_gid)
    return found


def _edit(backup_folder: Path, change: Callable[[dict], None]) -> None:
    manifest = json.loads((backup_folder / MANIFEST).read_text())
    change(manifest)
    (backup_folder / MANIFEST).write_text(json.dumps(manifest))


def _records_through_a_link(backup_folder: Path, outside: Path) -> str:
    """data/records replaced by a link to a folder outside, whose records name the old
    folder: a restore that relocated through it rewrote the outside files."""
    records = backup_folder / "data" / "records"
    for path in sorted(records.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    records.rmdir()
    target = os.path.relpath(outside, records.parent)
    records.symlink_to(target)

    def change(manifest: dict) -> None:
        for name in [n for n in manifest["files"] if n.startswith("data/records/")]:
            del manifest["files"][name]
        for name in [n for n in manifest["folders"] if n.startswith("data/records")]:
            del manifest["folders"][name]
        manifest["links"]["data/records"] = target

    _edit(backup_folder, change)
    return "data/records"


def _postgres_through_a_link(backup_folder: Path, outside: Path) -> str:
    """data/postgres as a link to an outside folder, which a restore under root chowned."""
    target = os.path.relpath(outside, backup_folder / "data")
    (backup_folder / "data" / "postgres").symlink_to(target)
    _edit(backup_folder, lambda manifest: manifest["links"].update({"data/postgres": target}))
    return "data/postgres"


def _an_absolute_link(backup_folder: Path, outside: Path) -> str:
    (backup_folder / "data" / "elsewhere").symlink_to(outside)
    _edit(
        backup_folder, lambda manifest: manifest["links"].update({"data/elsewhere": str(outside)})
    )
    return "data/elsewhere"


def _world_writable_secrets(backup_folder: Path, outside: Path) -> str:
    _edit(backup_folder, lambda manifest: manifest["folders"].update({"data/secrets": 0o777}))
    return "data/secrets"


def _setuid_models(backup_folder: Path, outside: Path) -> str:
    _edit(backup_folder, lambda manifest: manifest["folders"].update({"data/models": 0o4755}))
    return "data/models"


def _a_file_beneath_a_link(backup_folder: Path, outside: Path) -> str:
    """A file listed beneath data/models/latest, a link: its path would lead through it."""
    name = "data/models/latest/planted.json"

    def change(manifest: dict) -> None:
        manifest["files"][name] = manifest["files"]["data/leap.toml"]

    _edit(backup_folder, change)
    return name


def _a_link_out_by_the_folders_name(backup_folder: Path, outside: Path) -> str:
    """``../data/outside`` stays under ``data/`` on the manifest's face, but the restored
    folder is not named data: from it, the link leads to a sibling."""
    (backup_folder / "data" / "escape").symlink_to("../data/outside")
    _edit(backup_folder, lambda m: m["links"].update({"data/escape": "../data/outside"}))
    return "data/escape"


def _a_chain_of_links_out(backup_folder: Path, outside: Path) -> str:
    """Two links, each inside on its face: the second, read through the first, leads out."""
    (backup_folder / "data" / "d1" / "d2").mkdir(parents=True)
    (backup_folder / "data" / "d1" / "d2" / "A").symlink_to("../../e")
    (backup_folder / "data" / "d1" / "d2" / "B").symlink_to("A/../../../escaped")

    def change(manifest: dict) -> None:
        manifest["folders"].update({"data/d1": 0o700, "data/d1/d2": 0o700})
        manifest["links"].update({"data/d1/d2/A": "../../e", "data/d1/d2/B": "A/../../../escaped"})

    _edit(backup_folder, change)
    return "data/d1/d2/B"


@pytest.mark.parametrize(
    "tamper",
    [
        _a_link_out_by_the_folders_name,
        _a_chain_of_links_out,
        _records_through_a_link,
        _postgres_through_a_link,
        _an_absolute_link,
        _world_writable_secrets,
        _setuid_models,
        _a_file_beneath_a_link,
    ],
)
def test_a_tampered_backup_is_refused_and_nothing_outside_changes(tmp_path, tamper):
    data = _install(tmp_path / "data")
    outside = tmp_path / "outside"
    (outside / "cascade_model").mkdir(parents=True)
    (outside / "cascade_model" / "kept.json").write_text(
        json.dumps({"record": {"folder": str(data / "models")}})  # names the old folder
    )
    backup(data, tmp_path / "backup")
    restore(tmp_path / "backup", tmp_path / "as-taken")  # untampered, it restores
    before = _fingerprint(outside)
    named = tamper(tmp_path / "backup", outside)
    with pytest.raises(BackupError) as refused:
        restore(tmp_path / "backup", tmp_path / "restored")
    assert named in str(refused.value)
    assert _fingerprint(outside) == before
    assert not (tmp_path / "restored").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".restored")]  # no staging


def test_a_restored_folder_is_its_owners_only_and_its_links_stay_inside(tmp_path):
    data = _install(tmp_path / "data")
    (data / "models").chmod(0o755)
    (data / "out").symlink_to(tmp_path)  # absolute and outside: left out of the backup, named
    (data / "models" / "by-path").symlink_to(data / "models" / "night-1")  # absolute, inside
    outcome = backup(data, tmp_path / "backup")
    assert any(note.startswith("out links outside the folder") for note in outcome.notes)
    links = json.loads((tmp_path / "backup" / MANIFEST).read_text())["links"]
    assert links == {"data/models/latest": "night-1", "data/models/by-path": "night-1"}
    restored = tmp_path / "restored"
    restore(tmp_path / "backup", restored)
    assert stat.S_IMODE(restored.stat().st_mode) == 0o700
    assert stat.S_IMODE((restored / "models").stat().st_mode) == 0o755  # as recorded
    for path in [p for p in restored.rglob("*") if p.is_file() and not p.is_symlink()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert (restored / "models" / "by-path" / "night.json").is_file()
    assert not (restored / "out").exists() and not (restored / "out").is_symlink()
    (record,) = (restored / "records").rglob("*.json")
    assert json.loads(record.read_text())["record"]["folder"] == str(
        restored.resolve() / "models" / "night-1"
    )


def test_a_backup_without_secrets_holds_no_key(tmp_path):
    data = _install(tmp_path / "data")
    outcome = backup(data, tmp_path / "backup", without_secrets=True)
    manifest = json.loads((tmp_path / "backup" / MANIFEST).read_text())
    assert manifest["secrets"] == "left out"
    assert not [name for name in [*manifest["files"], *manifest["folders"]] if "secrets" in name]
    stored = [p for p in (tmp_path / "backup").rglob("*") if p.is_file()]
    assert stored and not any(b"s3cret" in p.read_bytes() for p in stored)
    assert any(note.startswith("secrets/ was left out") for note in outcome.notes)
    restore(tmp_path / "backup", tmp_path / "restored")
    assert not (tmp_path / "restored" / "secrets").exists()
    backup(data, tmp_path / "whole")
    assert (
        "data/secrets/postgres-password"
        in json.loads((tmp_path / "whole" / MANIFEST).read_text())["files"]
    )


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ("archive_command = 'touch /tmp/x'", "archive_command"),
        ("ARCHIVE_COMMAND='a # b' # note", "archive_command"),
        ("shared_preload_libraries 'evil'", "shared_preload_libraries"),
        ("include 'elsewhere.conf'", "include"),
        ("shared_preload_libraries = ''", None),
        ("# archive_command = 'touch /tmp/x'", None),
        ("max_connections = 100  # archive_command = 'x'", None),
        ("timezone = 'it''s fine'", None),
    ],
)
def test_a_copied_servers_configuration_may_run_no_program(tmp_path, line, refused):
    """What a stopped copy's postgresql.conf or postgresql.auto.conf may set: nothing that runs
    a program, loads a library or names a file (``backup_postgres.UNSAFE_SETTINGS``)."""
    from leap_pipeline.app.backup_postgres import PostgresBackupError, check_copied_config

    (tmp_path / "postgresql.conf").write_text("max_connections = 100\n")
    (tmp_path / "postgresql.auto.conf").write_text(f"# by ALTER SYSTEM\n{line}\n")
    if refused is None:
        check_copied_config(tmp_path)
        return
    with pytest.raises(PostgresBackupError, match=f"postgresql.auto.conf: line 2 sets {refused} "):
        check_copied_config(tmp_path)
