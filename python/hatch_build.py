"""Copies the repository's Functions library (``functions/ratelimit.lua``) into the package
when it is built: one source, shipped inside the wheel. From an sdist (where the repository is
not around) the copy the sdist carries is used."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CopyLibrary(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        source = root.parent / "functions" / "ratelimit.lua"
        target = root / "src" / "redis_ratelimit_client" / "ratelimit.lua"
        if source.is_file():
            shutil.copyfile(source, target)
        elif not target.is_file():
            raise FileNotFoundError(
                f"{source} is missing: build redis-ratelimit from the repository (python/), "
                "or from an sdist, which carries the library"
            )
