"""The request guard of ``retrieval serve``: an ASGI middleware that runs before any route.

In order, for every HTTP request:

1. **Host allow-list** (DNS rebinding): the ``Host`` header must name the server: a loopback name or address
   (``localhost``, 127.0.0.0/8, ``[::1]``) when it listens on loopback, the address it is bound to, an IP address
   when it listens on every interface (a rebinding attack needs a domain name), or a name given with
   ``--allow-host``. Anything else: 421, one line, before routing.
2. **Token** (``--token``): ``Authorization: Bearer``, ``?token=`` or the cookie a page opened with ``?token=``
   sets; 401 otherwise.
3. **Cross-site writes** (every method but GET / HEAD / OPTIONS): refused (403) when ``Sec-Fetch-Site`` is present
   and not ``same-origin`` / ``none``, or ``Origin`` is present and is not the server's own (its host and port
   equal to ``Host``). A request that a browser sent (it carries ``Origin`` or ``Sec-Fetch-Site``) must also carry
   the page's CSRF token: the ``X-CSRF-Token`` header equal to the ``retrieval_csrf`` cookie (double submit: a
   cross-site form can set neither). A request with neither header (curl, Python scripts) is not cross-site and
   passes; so does one with a valid ``Authorization: Bearer`` token.
4. **Body size**, counted as it arrives (chunked or not): past the limit the request is answered 413 at once and
   nothing more is read.
5. **Headers** of every response: ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``; of HTML
   responses: a Content-Security-Policy without inline script and ``X-Frame-Options: DENY``; HTML pages also set the
   CSRF cookie when the browser has none.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

from fastapi import HTTPException

TOKEN_COOKIE = "retrieval_token"
CSRF_COOKIE = "retrieval_csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""Content-Security-Policy of the pages: scripts and styles only from the server's own files (no inline script)."""
DOCS_CSP = CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
"""The ``/docs`` page (Swagger UI sets inline styles on its elements)."""


class BodyTooLarge(HTTPException):
    """Raised inside the app's ``receive`` when the body passes the limit: an HTTP 413 (FastAPI passes an
    ``HTTPException`` raised while it reads a body on as it is)."""

    def __init__(self, message: str):
        super().__init__(status_code=413, detail=message)


def host_of(header: str) -> str | None:
    """The host name or address of a ``Host`` header value (lower case, brackets of IPv6 removed), None when
    malformed."""
    value = header.strip().lower()
    if not value or any(c in value for c in "/@ \t\\"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (len(value) > end + 1 and not value[end + 1:].startswith(":")):
            return None
        return value[1:end]
    if value.count(":") > 1:
        return None
    return value.split(":", 1)[0]


def _ip(host: str):
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_loopback_name(host: str) -> bool:
    ip = _ip(host)
    return host in ("localhost", "localhost.") or (ip is not None and ip.is_loopback)


class HostPolicy:
    """Which ``Host`` headers name this server (module docstring, 1)."""

    def __init__(self, bound_host: str, allow_hosts=()):
        bound = bound_host.strip("[]").lower()
        self.bound = bound
        self.allowed = {bound, *(h.strip().strip("[]").lower() for h in allow_hosts if h and h.strip())}
        ip = _ip(bound)
        self.loopback = bound == "localhost" or (ip is not None and ip.is_loopback)
        self.wildcard = ip is not None and ip.is_unspecified

    def allows(self, host: str | None) -> bool:
        if host is None:
            return False
        if host in self.allowed:
            return True
        if self.loopback and is_loopback_name(host):
            return True
        return self.wildcard and _ip(host) is not None


def _headers(scope) -> dict:
    out = {}
    for k, v in scope.get("headers", ()):
        out.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
    return out


def _cookies(headers: dict) -> dict:
    jar = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except Exception:  # noqa: BLE001 - a malformed cookie header: no cookie
        return {}
    return {k: m.value for k, m in jar.items()}


def _json(status: int, message: str, extra=()) -> tuple[int, list, bytes]:
    body = json.dumps({"error": message}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"), *extra]
    return status, headers, body


class Guard:
    """The ASGI middleware (module docstring).

    Parameters
    ----------
    app : the ASGI app guarded
    hosts : HostPolicy
    token : str or None — ``--token``
    max_body : int — bytes of a request body refused past (the upload limit plus the multipart envelope)
    refused_bodies : list — where the bytes received of each body refused for its size are appended
    refused_writes : list or None — where the reason of each cross-site write refused is appended
    """

    def __init__(self, app, *, hosts: HostPolicy, token: str | None, max_body: int, refused_bodies: list,
                 refused_writes: list | None = None):
        self.app = app
        self.hosts = hosts
        self.token = token
        self.expected = token.encode("utf-8") if token else None
        self.max_body = int(max_body)
        self.refused_bodies = refused_bodies
        self.refused_writes = [] if refused_writes is None else refused_writes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = _headers(scope)
        host = host_of(headers.get("host", ""))
        if not self.hosts.allows(host):
            shown = headers.get("host", "")[:100] or "(none)"
            return await self._answer(send, *_json(421, f"Host {shown!r} does not name this server: requests must "
                                                        f"use its own address (start it with --allow-host NAME to "
                                                        f"accept another name)."))
        cookies = _cookies(headers)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        bearer = self._bearer(headers)
        if self.expected is not None:
            given = bearer or (query.get("token") or [None])[0] or cookies.get(TOKEN_COOKIE)
            if not given or not hmac.compare_digest(given.encode("utf-8"), self.expected):
                return await self._answer(send, *_json(
                    401, "missing or wrong token: send 'Authorization: Bearer TOKEN' (or open the page with "
                         "?token=TOKEN).", [(b"www-authenticate", b"Bearer")]))
        method = scope["method"].upper()
        if method not in SAFE_METHODS:
            problem = self._cross_site(headers, cookies, host, bearer_ok=bearer is not None and self.expected is not None)
            if problem:
                self.refused_writes.append(problem)
                return await self._answer(send, *_json(403, problem))
        length = headers.get("content-length")
        if length and length.isdigit() and int(length) > self.max_body:
            return await self._answer(send, *_json(413, self._too_large_message()))

        received = [0]

        async def counted_receive():
            message = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > self.max_body:
                    self.refused_bodies.append(received[0])
                    raise BodyTooLarge(self._too_large_message())
            return message

        started = [False]
        set_token = self.expected is not None and (query.get("token") or [None])[0] is not None and \
            cookies.get(TOKEN_COOKIE) != query["token"][0]
        wants_csrf = CSRF_COOKIE not in cookies

        async def guarded_send(message):
            if message["type"] == "http.response.start":
                started[0] = True
                hs = list(message.get("headers", []))
                names = {k.lower() for k, _ in hs}
                extra = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
                ctype = next((v for k, v in hs if k.lower() == b"content-type"), b"")
                if ctype.startswith(b"text/html"):
                    csp = DOCS_CSP if scope.get("path") == "/docs" else CSP
                    extra += [(b"content-security-policy", csp.encode()), (b"x-frame-options", b"DENY")]
                    if wants_csrf:
                        extra.append((b"set-cookie", f"{CSRF_COOKIE}={secrets.token_urlsafe(32)}; Path=/; "
                                                     f"SameSite=Strict".encode()))
                if set_token:   # a page opened with ?token=: the browser keeps it (a stale cookie is replaced)
                    extra.append((b"set-cookie", f"{TOKEN_COOKIE}={self.token}; HttpOnly; Path=/; "
                                                 f"SameSite=Strict".encode()))
                hs += [(k, v) for k, v in extra if k not in names or k == b"set-cookie"]
                message = {**message, "headers": hs}
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except BodyTooLarge:
            if not started[0]:
                await self._answer(send, *_json(413, self._too_large_message()))

    def _too_large_message(self) -> str:
        return (f"request body larger than the upload limit of {self.max_body / 1e6:.1f} MB (--max-upload-mb); "
                f"nothing was kept.")

    @staticmethod
    def _bearer(headers: dict) -> str | None:
        auth = headers.get("authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _cross_site(self, headers: dict, cookies: dict, host: str, *, bearer_ok: bool) -> str | None:
        """Why a state-changing request is refused as cross-site (None: it is not)."""
        site = headers.get("sec-fetch-site")
        origin = headers.get("origin")
        if site is not None and site.lower() not in ("same-origin", "none"):
            return f"cross-site request refused (Sec-Fetch-Site: {site}): this server takes writes only from its own page."
        if origin is not None:
            parts = urlsplit(origin) if origin != "null" else None
            own = headers.get("host", "").strip().lower()
            if parts is None or not parts.netloc or parts.netloc.lower() != own:
                return f"cross-site request refused (Origin {origin[:100]!r} is not this server's)."
        if bearer_ok or (site is None and origin is None):
            return None   # a script (curl, Python) or a token-bearing client: not a browser's cross-site form
        sent = headers.get(CSRF_HEADER, "")
        kept = cookies.get(CSRF_COOKIE, "")
        if not sent or not kept or not hmac.compare_digest(sent.encode(), kept.encode()):
            return ("missing or wrong CSRF token: the page sends its cookie retrieval_csrf as the X-CSRF-Token "
                    "header (reload the page).")
        return None

    @staticmethod
    async def _answer(send, status: int, headers: list, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def guard_overhead(n: int = 5000) -> dict:
    """What the request guard (:class:`retrieval.web.guard.Guard`) adds to a request: the same small ASGI app called
    ``n`` times in this process with and without it (a GET of a page, which gets the security headers and a CSRF
    cookie, and a same-origin POST with its CSRF token), best of 3; microseconds per request."""
    import asyncio
    import time

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/html; charset=utf-8")]})
        await send({"type": "http.response.body", "body": b"<html></html>"})

    guarded = Guard(app, hosts=HostPolicy("127.0.0.1"), token=None, max_body=1 << 20, refused_bodies=[])
    get = {"type": "http", "method": "GET", "path": "/", "query_string": b"",
           "headers": [(b"host", b"127.0.0.1:8000"), (b"accept", b"text/html")]}
    post = {"type": "http", "method": "POST", "path": "/api/search", "query_string": b"",
            "headers": [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
                        (b"sec-fetch-site", b"same-origin"), (b"cookie", b"retrieval_csrf=abc"),
                        (b"x-csrf-token", b"abc"), (b"content-length", b"5")]}

    async def receive():
        return {"type": "http.request", "body": b"id=12", "more_body": False}

    async def send(message):
        return None

    async def timed(target, scope):
        t = time.perf_counter()
        for _ in range(n):
            await target(scope, receive, send)
        return (time.perf_counter() - t) / n * 1e6

    def best(target, scope):
        return min(asyncio.run(timed(target, scope)) for _ in range(3))

    out = {}
    for name, scope in (("get_page", get), ("post_same_origin", post)):
        plain, with_guard = best(app, scope), best(guarded, scope)
        out[name] = {"plain_us": round(plain, 2), "guarded_us": round(with_guard, 2),
                     "added_us": round(with_guard - plain, 2)}
    return out
