"""The pluggy markers for the project name ``scopemem``. A leaf module, so any layer (stores
included) can mark its hook implementations without importing the host."""

from __future__ import annotations

import pluggy

PROJECT_NAME = "scopemem"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
