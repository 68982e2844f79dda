"""One Streamlit session driven without a browser, over Streamlit's own websocket protocol.

What a browser tab does, minus the JavaScript: ``GET /_stcore/health`` (which sets the
``_streamlit_xsrf`` cookie), a websocket to ``/_stcore/stream`` with the subprotocols
``["streamlit", <xsrf token>]`` and an ``Origin`` of the server's own address, then ``BackMsg``
protobufs out (``rerun_script``, ``file_urls_request``) and ``ForwardMsg`` protobufs in (the
page's deltas, ``page_info_changed``, ``script_finished``, ...). An upload is the browser's
three steps: a ``file_urls_request`` answered by a ``file_urls_response`` (a file id and its
URL), a multipart ``PUT`` of the file to ``/_stcore/upload_file/<session>/<file id>`` (with the
XSRF header and cookie), then a rerun whose widget states give the uploader an
``UploadedFileInfo`` for that file.

    with Session("http://127.0.0.1:8501") as session:
        session.open({"layer": "blocks.5", "target": "207"})   # as a link: query and page
        session.wait_finished(60)
        session.upload("cat.png", png_bytes, "image/png")     # into "Upload an image"
        session.wait_finished(60)
        print(session.text(), session.images(), session.query, session.errors())

The page is kept as the browser keeps it: each delta lands at its ``delta_path`` (its first
index is the root: 0 the main area, 1 the sidebar), a new element replaces what was there, and
when a full run finishes, what that run did not draw again is dropped (the browser's "stale"
elements). Fragment runs update their parts in place. What this client does not do: run
JavaScript, so custom components never answer and nothing a component would send back (a
rerun, a value) is sent; widgets keep the values the server gave them unless set here.

Standard library plus ``websockets`` and ``streamlit.proto``, both installed with Streamlit.
"""

from __future__ import annotations

import http.cookiejar
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from typing import Any

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.Common_pb2 import FileURLs, UploadedFileInfo
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.sync.client import connect

SUCCESS = ForwardMsg.FINISHED_SUCCESSFULLY
COMPILE_ERROR = ForwardMsg.FINISHED_WITH_COMPILE_ERROR
EARLY_FOR_RERUN = ForwardMsg.FINISHED_EARLY_FOR_RERUN
FRAGMENT_SUCCESS = ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY
ROOTS = {"main": 0, "sidebar": 1, "event": 2, "bottom": 3}
# the elements whose text a reader sees (``texts``)
TEXT_KINDS = ("heading", "markdown", "text", "alert", "exception")
XSRF_COOKIE = "_streamlit_xsrf"


class SessionError(RuntimeError):
    """The server refused or closed the session, or a request failed."""


class Session:
    """One browser-less session of a Streamlit app at ``url`` (``http://host:port``).

    Thread-safe for one caller at a time: a background thread reads the websocket, so the
    page's accessors can be read while a run goes on. ``close`` (or the ``with`` block's end)
    disconnects it; the server then keeps the session for ``server.disconnectedSessionTTL``.

    Attributes:
        url: the server's address.
        session_id: the server's id for this session (from the first run's ``new_session``).
        query: the query string the page holds now: the one sent by ``open``, then any the
            script wrote (``page_info_changed``); a rerun sends it back, as the browser does.
        messages: how many ForwardMsgs arrived.
        received_bytes: their total size on the wire.
    """

    def __init__(
        self, url: str, *, timeout: float = 30.0, authorization: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.session_id: str | None = None
        self.query = ""
        self.messages = 0
        self.received_bytes = 0
        self._page_name = ""
        self._page_hash = ""
        self._widgets: dict[str, WidgetState] = {}
        self._lock = threading.Condition()
        # the page: delta path -> (kind, element or block proto, the run that drew it)
        self._tree: dict[tuple[int, ...], tuple[str, Any, int]] = {}
        self._run = 0  # runs started (new_session); the current run's number
        self._asked = 0  # self._run when the last request was sent
        self._finished: tuple[int, int] | None = None  # (run, status) of the last finish
        self._fragment_run = False
        self._statuses: list[int] = []  # every script_finished status, in order
        self._exceptions: list[str] = []  # compile errors (session_event), not page elements
        self._file_urls: dict[str, Any] = {}
        self._page_not_found = False
        self._closed: BaseException | None = None
        jar = http.cookiejar.CookieJar()
        self._http = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        # behind a password (deploy/serve.py --password-file): every request carries it
        auth = {"Authorization": authorization} if authorization else {}
        self._http.addheaders = list(auth.items())
        with self._http.open(f"{self.url}/_stcore/health", timeout=timeout) as reply:
            reply.read()
        self._xsrf = next((c.value for c in jar if c.name == XSRF_COOKIE), "")
        protocols = ["streamlit", self._xsrf] if self._xsrf else ["streamlit"]
        # every cookie the server set, as a browser sends them: behind a proxy, the one that
        # keeps this session on its replica too (the upload's PUT must reach the same one)
        self._jar = jar
        cookies = "; ".join(f"{cookie.name}={cookie.value}" for cookie in jar)
        headers = {"Cookie": cookies, **auth} if cookies else dict(auth)
        try:  # (entered as a context manager: what websockets 17 asks of a connection)
            self._ws = connect(
                self.url.replace("http", "ws", 1) + "/_stcore/stream",
                subprotocols=protocols,  # type: ignore[arg-type]
                origin=self.url,  # type: ignore[arg-type]
                additional_headers=headers,
                open_timeout=timeout,
                max_size=None,
                # (permessage-deflate offered, as a browser does: server.enableWebsocketCompression)
                ping_interval=None,  # (a browser sends no pings: a busy server is not a dead one)
            ).__enter__()
        except Exception as exc:
            raise SessionError(f"could not open a session at {self.url}: {exc}") from exc
        self._reader = threading.Thread(target=self._read, daemon=True, name="st-session")
        self._reader.start()

    def cookie(self, name: str) -> str | None:
        """The value of the cookie ``name`` the server (or a proxy in front) set, if any."""
        return next((cookie.value for cookie in self._jar if cookie.name == name), None)

    # --- requests --------------------------------------------------------------------------

    def open(self, query: Mapping[str, Any] | str | None = None, page: str | None = None) -> None:
        """Run the app as a link would open it: ``query`` (a dict, or the text after ``?``)
        and ``page`` (a page's URL path, e.g. ``"methods"``; None: the default page). Widget
        values set here before are forgotten, as on a fresh page load."""
        if isinstance(query, Mapping):
            query = urllib.parse.urlencode({k: str(v) for k, v in query.items()})
        self.query = query or ""
        self._page_name = page or ""
        self._page_hash = ""
        self._widgets.clear()
        self._rerun()

    def rerun(self) -> None:
        """Rerun the page as the browser does after a widget change: the current page, the
        query string the page holds and the widget values set here."""
        self._rerun()

    def upload(
        self,
        name: str,
        data: bytes,
        mime: str = "application/octet-stream",
        *,
        label: str = "Upload an image",
        timeout: float = 60.0,
    ) -> None:
        """Put ``data`` into the file uploader labelled ``label`` (the page must show it:
        ``wait_finished`` first), as the browser does, and rerun the page with it."""
        uploader = self.widget(label, "file_uploader")
        if uploader is None:
            raise SessionError(f"no file uploader labelled {label!r} on the page")
        if self.session_id is None:
            raise SessionError("no session id yet: run the page first")
        request_id = uuid.uuid4().hex
        message = BackMsg()
        message.file_urls_request.request_id = request_id
        message.file_urls_request.file_names.append(name)
        message.file_urls_request.session_id = self.session_id
        self._send(message)
        with self._lock:
            answered = self._lock.wait_for(
                lambda: request_id in self._file_urls or self._closed is not None, timeout
            )
            response = self._file_urls.pop(request_id, None)
        if not answered or response is None:
            raise SessionError(f"no file_urls_response within {timeout} s ({self._closed})")
        if response.error_msg:
            raise SessionError(f"file_urls_request refused: {response.error_msg}")
        urls: FileURLs = response.file_urls[0]
        self._put(urls.upload_url, name, data, mime, timeout)
        state = WidgetState(id=uploader.id)
        state.file_uploader_state_value.uploaded_file_info.append(
            UploadedFileInfo(file_id=urls.file_id, name=name, size=len(data), file_urls=urls)
        )
        self._widgets[uploader.id] = state
        self._rerun()

    def clear_caches(self) -> None:
        """Clear the server's ``st.cache_data`` and ``st.cache_resource`` (every session's), as
        the browser's "Clear caches" menu item does."""
        message = BackMsg()
        message.clear_cache = True
        self._send(message)

    def set_widget(self, state: WidgetState) -> None:
        """Hold a widget's value (a ``WidgetState`` with its id) for the following reruns."""
        self._widgets[state.id] = state

    def wait_finished(self, timeout: float = 60.0) -> int:
        """Wait until the run chain started by the last request has ended: a run that began
        after the request finished, successfully or with a compile error, and no run followed
        it (a run stopped early for a rerun is not an end). Returns its status (``SUCCESS`` or
        ``COMPILE_ERROR``; ``FRAGMENT_SUCCESS`` when a fragment run ends the chain). Raises
        ``TimeoutError``, or ``SessionError`` when the websocket closed."""

        def ended() -> bool:
            if self._closed is not None:
                return True
            if self._finished is None or self._finished[0] <= self._asked:
                return False
            run, status = self._finished
            return run == self._run and status != EARLY_FOR_RERUN

        with self._lock:
            if not self._lock.wait_for(ended, timeout):
                raise TimeoutError(f"the page did not finish within {timeout} s")
            if self._finished is None or self._finished[0] <= self._asked:
                raise SessionError(f"the websocket closed: {self._closed}")
            return self._finished[1]

    def close(self) -> None:
        """Disconnect (the server keeps the session until its TTL)."""
        self._ws.close()
        self._reader.join(timeout=10)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what the page shows -----------------------------------------------------------------

    def elements(self, where: str | None = None) -> list[tuple[tuple[int, ...], str, Any]]:
        """The page's elements in page order: (delta path, kind, the kind's proto), e.g.
        ``((0, 3, 1), "markdown", Markdown)``; ``where``: "main" or "sidebar" only."""
        root = None if where is None else ROOTS[where]
        with self._lock:
            items = sorted(self._tree.items())
        return [
            (path, kind, proto)
            for path, (kind, proto, _) in items
            if kind != "block" and (root is None or path[0] == root)
        ]

    def texts(self, where: str | None = None) -> list[str]:
        """What a reader sees: headings, markdown (captions too), text, alerts and exception
        messages, in page order."""
        out = []
        for _, kind, proto in self.elements(where):
            if kind in TEXT_KINDS:
                out.append(proto.message if kind == "exception" else proto.body)
        return out

    def text(self, where: str | None = None) -> str:
        """``texts`` as one string, a line between elements."""
        return "\n".join(self.texts(where))

    def alerts(self) -> list[tuple[str, str]]:
        """(kind, body) of each alert: kind is "error", "warning", "info" or "success"."""
        names = {1: "error", 2: "warning", 3: "info", 4: "success"}
        return [
            (names.get(proto.format, "alert"), proto.body)
            for _, kind, proto in self.elements()
            if kind == "alert"
        ]

    def errors(self) -> list[str]:
        """Error alerts, exception elements ("Type: message") and compile errors."""
        out = [body for kind, body in self.alerts() if kind == "error"]
        out += [
            f"{proto.type}: {proto.message}"
            for _, kind, proto in self.elements()
            if kind == "exception"
        ]
        with self._lock:
            return out + list(self._exceptions)

    def images(self) -> list[str]:
        """The URLs of the page's ``st.image`` pictures (``/media/...``), in page order."""
        return [
            img.url for _, kind, proto in self.elements() if kind == "imgs" for img in proto.imgs
        ]

    def widget(self, label: str, kind: str | None = None) -> Any:
        """The first widget labelled ``label`` (of ``kind``, e.g. "selectbox"), or None."""
        for _, found, proto in self.elements():
            if (kind is None or found == kind) and getattr(proto, "label", None) == label:
                return proto
        return None

    def widget_value(self, label: str) -> Any:
        """What a selectbox, radio, checkbox, text input or slider labelled ``label`` shows
        as the server drew it (a choice's option text), or None where there is none."""
        proto = self.widget(label)
        if proto is None:
            return None
        set_value = getattr(proto, "set_value", False)
        if proto.DESCRIPTOR.fields_by_name.get("raw_value") is not None and not hasattr(
            proto, "step"
        ):  # a selectbox or radio: the value set by the script, else its default option
            if set_value and proto.HasField("raw_value"):
                return proto.raw_value
            if proto.HasField("default") and 0 <= proto.default < len(proto.options):
                return proto.options[proto.default]
            return None
        if "value" not in proto.DESCRIPTOR.fields_by_name:
            return None
        value = proto.value if set_value else proto.default
        return value if isinstance(value, (bool, int, float, str)) else list(value)

    def components(self) -> dict[str, Any]:
        """The custom components (v2, ``bidi_component``) on the page by their key: the
        ``BidiComponent`` protos, whose ``json``/``bytes``/``mixed`` hold their data."""
        return {
            proto.id.rsplit("-", 1)[-1]: proto
            for _, kind, proto in self.elements()
            if kind == "bidi_component"
        }

    def query_params(self) -> dict[str, str]:
        """``query`` as a dict (the last value of a repeated key)."""
        return dict(urllib.parse.parse_qsl(self.query, keep_blank_values=True))

    @property
    def statuses(self) -> list[int]:
        """Every ``script_finished`` status so far, in order."""
        with self._lock:
            return list(self._statuses)

    @property
    def page_not_found(self) -> bool:
        """Whether the server said the page asked for does not exist."""
        return self._page_not_found

    # --- the protocol ------------------------------------------------------------------------

    def _rerun(self) -> None:
        message = BackMsg()
        state = message.rerun_script
        state.query_string = self.query
        state.page_name = self._page_name
        state.page_script_hash = self._page_hash
        state.widget_states.widgets.extend(self._widgets.values())
        info = state.context_info
        info.url = f"{self.url}/{self._page_name}" + (f"?{self.query}" if self.query else "")
        info.timezone, info.timezone_offset, info.locale = "UTC", 0, "en-US"
        with self._lock:
            self._asked = self._run
        self._send(message)

    def _send(self, message: BackMsg) -> None:
        if self._closed is not None:
            raise SessionError(f"the websocket closed: {self._closed}")
        self._ws.send(message.SerializeToString())

    def _put(self, path: str, name: str, data: bytes, mime: str, timeout: float) -> None:
        boundary = uuid.uuid4().hex
        quoted = name.replace('"', "%22")
        body = b"".join(
            [
                f"--{boundary}\r\n".encode(),
                f'Content-Disposition: form-data; name="file"; filename="{quoted}"\r\n'.encode(),
                f"Content-Type: {mime}\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        request = urllib.request.Request(
            self.url + path,
            data=body,
            method="PUT",
            headers={
                "Content-Type": f"multipart/form-data; boundary={boundary}",
                "X-Xsrftoken": self._xsrf,
                "Origin": self.url,
            },
        )
        try:
            with self._http.open(request, timeout=timeout) as reply:
                reply.read()
        except urllib.error.HTTPError as exc:
            raise SessionError(f"upload refused: HTTP {exc.code} {exc.read()[:200]!r}") from exc

    def _read(self) -> None:
        try:
            for frame in self._ws:
                message = ForwardMsg()
                message.ParseFromString(frame)  # type: ignore[arg-type]
                with self._lock:
                    self.messages += 1
                    self.received_bytes += len(frame)
                    self._handle(message)
                    self._lock.notify_all()
        except Exception as exc:  # (the websocket's end: closed by either side)
            closed: BaseException = exc
        else:
            closed = SessionError("closed")
        with self._lock:
            self._closed = closed
            self._lock.notify_all()

    def _handle(self, message: ForwardMsg) -> None:
        kind = message.WhichOneof("type")
        if kind == "delta":
            self._delta(tuple(message.metadata.delta_path), message.delta)
        elif kind == "new_session":
            self._run += 1
            self._fragment_run = bool(message.metadata.run.fragment_ids)
            if message.new_session.initialize.session_id:
                self.session_id = message.new_session.initialize.session_id
        elif kind == "script_finished":
            status = message.script_finished
            self._statuses.append(status)
            self._finished = (self._run, status)
            if status == SUCCESS:  # drop what this full run did not draw again
                self._tree = {p: v for p, v in self._tree.items() if v[2] == self._run}
        elif kind == "page_info_changed":
            self.query = message.page_info_changed.query_string
        elif kind == "navigation":
            self._page_hash = message.navigation.page_script_hash
        elif kind == "page_not_found":
            self._page_not_found = True
        elif kind == "file_urls_response":
            self._file_urls[message.file_urls_response.response_id] = message.file_urls_response
        elif kind == "session_event":
            event = message.session_event
            if event.HasField("script_compilation_exception"):
                error = event.script_compilation_exception
                self._exceptions.append(f"{error.type}: {error.message}")

    def _delta(self, path: tuple[int, ...], delta: Any) -> None:
        which = delta.WhichOneof("type")
        if which == "new_element":
            element = delta.new_element
            kind = element.WhichOneof("type") or "empty"
            # an element replaces a block there, and with it the block's contents
            depth = len(path)
            self._tree = {p: v for p, v in self._tree.items() if p[:depth] != path or p == path}
            self._tree[path] = (kind, getattr(element, kind), self._run)
        elif which == "add_block":
            self._tree[path] = ("block", delta.add_block, self._run)
        # (new_transient: spinners and the like, gone when their run ends: not kept)
