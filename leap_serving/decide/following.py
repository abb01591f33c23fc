"""Following the pointer: the Ranker's model loader and its reload thread.

The model loads in the background: the constructor returns at once, and a launch before the
first model is ready gets an empty ranking with the reason "model loading". Every
``check_interval_s`` a call starts a background check of the pointer (a registry alias, or a
published folder's manifest); a version that differs is loaded whole, and served, or held on
canary (``canary``); with ``follow_in_background`` a thread of its own checks it, with no call
needed, and ends a canary whose time is up. A model that fails its integrity checks is refused,
and the ranker keeps serving the one it had. ``ModelFollowing`` is a part of ``Ranker``
(``ranker``), whose state it reads and changes under the Ranker's locks.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from ..model.publish import PublicationError, manifest_stamp
from ..model.published import LeapModel, ModelArtifactError
from ..registry.registered import registry_version
from ..registry.rest import RegistryReadError
from .canary import Canary
from .loaded import Loaded, prepare

log = logging.getLogger("leap_serving")


class ModelFollowing:
    """The loader's part of ``Ranker``: load, swap, follow the pointer, refuse."""

    @property
    def model_version(self) -> str | None:
        loaded = self._loaded
        return loaded.version if loaded else None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the first load attempt has finished; True if a model is loaded."""
        self._ready.wait(timeout)
        return self._loaded is not None

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def reload(self) -> bool:
        """Load the model the URI names now if it differs from the one held; True if swapped.

        The pointer (the alias, or the folder's manifest) is read once and that exact version
        loaded. A model that cannot load or fails its checks leaves the held one serving. With
        ``canary_launches``, a new version after the first is held on canary instead (False;
        ``stats()['canary']`` shows it) and the launches that follow promote or refuse it.
        """
        with self._load_lock:
            try:
                return self._reload()
            finally:
                self._checked_at = time.monotonic()
                self._ready.set()

    def _reload(self) -> bool:
        try:
            source, stamp = self._pointer()
            with self._lock:
                if stamp is not None and stamp == self._passed_over:
                    return False  # its canary refused it: not tried again while it is named
                self._passed_over = None
                held, canary = self._loaded, self._canary
                if canary is not None and stamp is not None and stamp == canary.loaded.stamp:
                    return False  # on canary already
                self._canary = None  # the pointer names another version: the canary ends
            if canary is not None:
                log.warning(
                    "leap_serving: canary of model %s version %s abandoned after %d of %d "
                    "launches: the pointer names %s now",
                    self.model_uri,
                    canary.loaded.name,
                    canary.seen,
                    canary.needed,
                    stamp,
                )
            if held is not None and stamp is not None and stamp == held.stamp:
                return False
            loaded = self._load(source, stamp)
        except (ModelArtifactError, PublicationError, RegistryReadError, OSError) as exc:
            # a registry away or refusing is an answer to log in a line, not a bug's traceback
            self._refused(f"model {self.model_uri} cannot be loaded: {exc}")
            return False
        except Exception as exc:  # MLflow's errors, or a bug: keep the traceback
            self._refused(
                f"model {self.model_uri} cannot be loaded: {type(exc).__name__}: {exc}",
                traceback=True,
            )
            return False
        return self._take(loaded)

    def _take(self, loaded: Loaded) -> bool:
        """Serve a freshly loaded version (True), or hold it on canary beside the serving one."""
        with self._lock:
            held = self._loaded
            on_canary = held is not None and self.canary_launches > 0
            if on_canary:
                self._canary = Canary(loaded, self.canary_launches)
            else:
                self._loaded = loaded
        if on_canary:
            log.info(
                "leap_serving: model %s version %s loaded, on canary for %d launches beside "
                "version %s",
                self.model_uri,
                loaded.name,
                self.canary_launches,
                held.name,
            )
            return False
        self._serving(loaded, "loaded")
        return True

    def _serving(self, loaded: Loaded, how: str) -> None:
        self._load_error = None
        self._count("models_loaded")
        log.info("leap_serving: model %s version %s %s", self.model_uri, loaded.name, how)
        self._warn_if_outdated()

    def _warn_if_outdated(self) -> None:
        stats = self.stats()
        if stats["model_stale"]:
            log.warning(
                "leap_serving: model %s is %d days past its history snapshot (limit %d): is the "
                "nightly pipeline running?",
                self.model_uri,
                stats["model_age_days"],
                self.max_model_age_days,
            )
        if stats["dependency_drift"]:
            log.warning(
                "leap_serving: model %s was saved with other library versions than these "
                "(name: saved, here): %s",
                self.model_uri,
                stats["dependency_drift"],
            )

    def _refused(self, message: str, traceback: bool = False) -> None:
        held = self._loaded
        if held is not None:
            message += f"; still serving version {held.version or held.stamp}"
        self._load_error = message
        self._count("models_refused")
        (log.exception if traceback else log.error)("leap_serving: %s", message)

    def _pointer(self) -> tuple[str | Path | LeapModel, str | None]:
        """What to load and its identity, read once: (URI, registry version) or (the folder the
        path points at now, its manifest's sha256), or the model held in memory."""
        if self._model is not None:
            return self._model, "memory"
        if self.model_uri.startswith("models:/"):
            return self.model_uri, registry_version(self.model_uri)
        folder = Path(self.model_uri).resolve()
        return folder, manifest_stamp(folder)

    def _load(self, source: str | Path | LeapModel, stamp: str | None) -> Loaded:
        return prepare(source, stamp)

    def _start_refresh(self) -> bool:
        with self._lock:
            if self._refreshing:
                return False
            self._refreshing = True

        def refresh() -> None:
            try:
                self.reload()
            finally:
                with self._lock:
                    self._refreshing = False

        threading.Thread(target=refresh, name="leap-model-refresh", daemon=True).start()
        return True

    def _maybe_refresh(self) -> None:
        self._end_canary_if_due()
        if time.monotonic() - self._checked_at < self.check_interval_s:
            return
        self._checked_at = time.monotonic()
        self._start_refresh()

    def _start_following(self) -> None:
        """Check the pointer every ``check_interval_s`` on a daemon thread, whether or not
        rankings arrive, and end a canary once its ``canary_max_s`` is up (woken for it)."""

        def follow() -> None:
            while True:
                wait = self.check_interval_s - (time.monotonic() - self._checked_at)
                canary, bound = self._canary, self.canary_max_s
                if canary is not None and bound is not None:
                    wait = min(wait, canary.started + bound - time.monotonic())
                if self._stop.wait(max(wait, 0.05)):
                    return
                try:
                    self._end_canary_if_due()
                    if time.monotonic() - self._checked_at >= self.check_interval_s:
                        self.reload()
                except Exception:  # never the end of the follower: logged, tried again
                    log.exception("leap_serving: following model %s failed", self.model_uri)

        threading.Thread(target=follow, name="leap-model-follow", daemon=True).start()

    def close(self) -> None:
        """Stop the background follower (``follow_in_background``); rankings still answer."""
        self._stop.set()
