"""The Memory Hub: see, search and steer memory in a browser.

Served under ``/hub/`` by the Memory Worker when ``SCOPEMEM_HUB_TOKEN`` is set
(``scopemem serve``), or over the configured store by ``scopemem hub``. Its templates and
static files ship in this package; nothing is fetched from elsewhere. It needs the ``hub``
extra (Jinja2 through aiohttp-jinja2), imported only when the hub is on. ``app.py`` mounts
it, ``auth.py`` guards it, ``reading.py`` and ``steering.py`` are its pages and actions,
``overview.py`` the overview's numbers and charts, ``shared.py`` what they share (the caller
the hub acts as), and ``plugin.py`` the ``scopemem hub`` command.
"""

from __future__ import annotations

HUB_TOKEN_ENV = "SCOPEMEM_HUB_TOKEN"
#: The shortest hub token the hub starts with (unless ``--insecure-dev``).
MIN_TOKEN_CHARS = 16


def hub_token_problem(hub_token: str, data_token: str, insecure_dev: bool = False,
                      metrics_token: str = "") -> str | None:
    """Why the hub cannot start with ``hub_token``, which is set (None: it can)."""
    from scopemem.core.text import is_bearer_token

    if hub_token == data_token:
        return (f"{HUB_TOKEN_ENV} must differ from the data token: a hub session changes "
                "records, a data token holder should not get one")
    if hub_token == metrics_token:
        return (f"{HUB_TOKEN_ENV} must differ from SCOPEMEM_METRICS_TOKEN: a hub session "
                "changes records, and a scraper holding the metrics token should read "
                "/metrics only")
    if len(hub_token) < MIN_TOKEN_CHARS and not insecure_dev:
        return (f"{HUB_TOKEN_ENV} is {len(hub_token)} characters; at least "
                f"{MIN_TOKEN_CHARS} are needed")
    if not is_bearer_token(hub_token):
        return f"{HUB_TOKEN_ENV} must be printable ASCII without spaces"
    try:
        import aiohttp_jinja2  # noqa: F401
    except ImportError:
        return ("the Memory Hub needs its extra: pip install -e '.[hub]' (or unset "
                f"{HUB_TOKEN_ENV})")
    return None
