"""The names bryo's plugin system is built on: project, entry-point groups, markers, settings.

pluggy matches hook implementations to specifications by project name, so every marker
made for the project `bryo` is interchangeable; these two are the ones bryo documents.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "bryo"

ENTRY_POINT_GROUP = "bryo"
"""Plugins in this group load when the plugin manager is created; `bryo.<family>` groups
(and `bryo.<family>.<key>`) load lazily, when their family is first needed."""

AUTOLOAD_ENV = "BRYO_DISABLE_PLUGIN_AUTOLOAD"
"""Set to 1 (or true, yes, on) to load no entry point at all: built-ins only."""

BLOCK_ENV = "BRYO_BLOCK_PLUGINS"
"""Comma-separated plugin or distribution names that bryo must not load."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
