"""The service's data folder, its owner's only: ``leap up`` locks it down at each start.

The folder holds the warehouse, every model version's artifacts, the run records, the compute
logs and the secrets: read by another local user, it gives away the fleet's logs and, through
the records, where everything else lies. ``leap up`` runs under umask 0077, so what its servers
and runs write from then on is the owner's only, and at each start takes group and other access
off what an earlier start, a demo or an older release left. The folder itself gives others
nothing, so a file another process creates in it later (a `leap materialize` under the user's
own umask) is out of their reach too. When Postgres runs as a user of its own (under root the
embedded wheel does), the group its processes run with may traverse the folder (0710):
Postgres must reach ``postgres/``, which stays as Postgres keeps it. That group is the
postmaster's own, read from the running process: the wheel changes only the user, so under
root it is root's group; the user's own group left Postgres unable to reach its folder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SERVICE_UMASK = 0o077


def lock_down(data: Path, postgres: Path, postgres_group: int | None = None) -> int:
    """Take group and other access off every entry under ``data`` but ``postgres`` (and what it
    holds), links left alone; ``data`` itself 0700, or 0710 with the group ``postgres_group``
    (the group Postgres's processes run with, which must traverse it to reach ``postgres``).
    Returns how many entries changed."""
    changed = 0
    for root, dirs, files in os.walk(data):
        here = Path(root)
        dirs[:] = [d for d in dirs if here / d != postgres]
        for path in [here / name for name in [*dirs, *files]]:
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode) or not stat.S_IMODE(info.st_mode) & 0o077:
                continue
            path.chmod(stat.S_IMODE(info.st_mode) & ~0o077)
            changed += 1
    if postgres_group is not None and data.stat().st_gid != postgres_group:
        os.chown(data, -1, postgres_group)
        changed += 1
    wanted = 0o710 if postgres_group is not None else 0o700
    if stat.S_IMODE(data.stat().st_mode) != wanted:
        data.chmod(wanted)
        changed += 1
    return changed
