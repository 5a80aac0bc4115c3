"""The read-only web console, served by the daemon's HTTP endpoint (:mod:`maintd.service.http`).

Pages (``GET`` only; nothing on them changes a table, the store or the daemon):

- ``/``: the fleet, every table's health at a glance, one page at a time, the unhealthiest first. Filtered and
  ordered by query parameters (``q``, ``state``, ``sort``, ``desc``, ``page``, ``per``), with the targets each
  table misses; the warehouse roots.
- ``/table?uri=...``: one table, its runs over time (inline SVG), its runs, the plan of its newest run explained
  bucket by bucket, and what its log says now (properties, pins, policy with the knobs the daemon tuned, files
  by bucket and level), its targets, measured figures, gaps and last re-tune.
- ``/run?id=...``: one run, its measures, tasks, error and decisions;
- ``/daemon``: the replicas and their leases, this replica's queue, its settings with every secret redacted.

Who may see it (``http.console``): by default only a client of a loopback address (``auto``), or anyone who
presents ``http.console_token`` (bearer, or as the basic-auth password) or ``http.console_user`` and
``http.console_password`` (basic auth). Credentials are compared in constant time. Pages are server-rendered
HTML with every value escaped, need no JavaScript, and are sent with a Content-Security-Policy that forbids
scripts, frames and any resource from elsewhere.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from maintd.service import console_pages as pages
from maintd.service.console_html import page, text
from maintd.service.console_reads import FLEET_SORTS, FLEET_STATES, FleetQuery

if TYPE_CHECKING:
    from maintd.service.daemon import WorkView
    from maintd.service.store import StateStore
    from maintd.settings import Settings

#: The paths the console answers; the endpoint sends every other path elsewhere.
PATHS = frozenset({"/", "/table", "/run", "/daemon"})
#: No script, no frame, nothing loaded from elsewhere: the pages are self-contained HTML with inline styles.
CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                           "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
MAX_PER_PAGE = 500


@dataclass(frozen=True, slots=True)
class Response:
    """A console answer: status, body and extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


class ConsoleQueryError(ValueError):
    """A query parameter of a console page is invalid (answered 400, naming the parameter)."""


class Console:
    """The console's pages over a state store.

    Args:
        store: the state store every page reads.
        settings: the daemon's settings (shown redacted on the daemon page; the policy file of the table page;
            the console's credentials). None: no credentials, no settings shown.
        holder: this replica's lease holder id.
        work: returns this replica's work now (None: no daemon loop in this process, e.g. before Spark is up).
    """

    def __init__(self, store: StateStore, settings: Settings | None = None, *, holder: str | None = None,
                 work: Callable[[], WorkView | None] | None = None) -> None:
        self.store = store
        self.settings = settings
        self.holder = holder
        self.work = work or (lambda: None)
        http = settings.http if settings is not None else None
        self._token = http.console_token.encode() if http is not None and http.console_token else None
        self._basic = (f"{http.console_user}:{http.console_password}".encode()
                       if http is not None and http.console_password else None)

    @property
    def protected(self) -> bool:
        """Whether pages need credentials."""
        return self._token is not None or self._basic is not None

    def authorized(self, authorization: str | None) -> bool:
        """Whether the ``Authorization`` header grants access (always, when no credential is configured)."""
        if not self.protected:
            return True
        scheme, _, value = (authorization or "").strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self._token is not None:
            return hmac.compare_digest(value.encode(), self._token)
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
        granted = self._basic is not None and hmac.compare_digest(decoded, self._basic)
        if self._token is not None:  # any user, the token as password: what a browser's prompt can send
            granted = hmac.compare_digest(decoded.partition(b":")[2], self._token) or granted
        return granted

    def respond(self, path: str, query: str, authorization: str | None) -> Response:
        """The answer to ``GET path?query``: a page, 400 (a bad parameter), 401 or 404."""
        if not self.authorized(authorization):
            challenge = 'Basic realm="maintd console", charset="UTF-8"'
            return Response(401, page("Credentials needed", "<p>This console needs the token or the user and "
                                      "password of <code>http.console_*</code>.</p>"),
                            (("WWW-Authenticate", challenge),))
        params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        try:
            body = self._page(path, params)
        except ConsoleQueryError as exc:
            return Response(400, page("Bad request", f"<p class=bad>{text(exc)}</p>"))
        if body is None:
            return Response(404, page("Not found", "<p>Nothing is recorded under that name; "
                                      '<a href="/">back to the fleet</a>.</p>'))
        return Response(200, body)

    def _page(self, path: str, params: Mapping[str, str]) -> bytes | None:
        if path == "/":
            return pages.fleet(self.store, fleet_query(params))
        if path == "/table":
            uri = params.get("uri", "")
            if not uri:
                raise ConsoleQueryError("the table page needs ?uri= (a registered table's URI)")
            return pages.table_page(self.store, self.settings, uri, _int(params, "before", None))
        if path == "/run":
            run_id = _int(params, "id", None)
            if run_id is None:
                raise ConsoleQueryError("the run page needs ?id= (a run id, as the table page lists them)")
            return pages.run_page(self.store, run_id)
        if path == "/daemon":
            return pages.daemon_page(self.store, self.settings, self.holder, self.work())
        return None


def fleet_query(params: Mapping[str, str]) -> FleetQuery:
    """The fleet page's query from its parameters.

    Raises:
        ConsoleQueryError: a parameter is invalid; the message names it and what it takes.
    """
    state = params.get("state") or None
    if state is not None and state not in FLEET_STATES:
        raise ConsoleQueryError(f"state={state!r} is not one of {', '.join(FLEET_STATES)} (or empty: any)")
    sort = params.get("sort") or "health"
    if sort not in FLEET_SORTS:
        raise ConsoleQueryError(f"sort={sort!r} is not one of {', '.join(FLEET_SORTS)}")
    per = _int(params, "per", 50)
    if per is None or not 1 <= per <= MAX_PER_PAGE:
        raise ConsoleQueryError(f"per={per} must be between 1 and {MAX_PER_PAGE}")
    page_number = _int(params, "page", 1)
    if page_number is None or page_number < 1:
        raise ConsoleQueryError("page must be 1 or more")
    return FleetQuery(text=params.get("q", "")[:200], state=state, sort=sort,  # type: ignore[arg-type]
                      descending=params.get("desc") in ("1", "true", "on"), page=page_number, per_page=per)


def _int(params: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = params.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConsoleQueryError(f"{name}={raw[:40]!r} is not a whole number") from None


__all__ = ["CONTENT_SECURITY_POLICY", "PATHS", "Console", "ConsoleQueryError", "Response", "fleet_query"]
