"""A tiny PEP 503 package index with one wheel built in memory, for egress tests.

The setup tests install a package through the egress proxy from a server on
127.0.0.1 (SPEC 7.1: a local index listed as `127.0.0.1:<port>`). The app also serves
a redirect (to check that a followed redirect is a new, checked request) and a blob of
any size (the proxy-overhead benchmark).
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from coding_agent.sandbox.http_server import ServedApp

__all__ = ["PackageIndex", "build_wheel"]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(name: str, version: str, module_source: str) -> tuple[str, bytes]:
    """(file name, bytes) of a pure-Python wheel whose package `name` holds `module_source`."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": module_source.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: coding-agent-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buffer.getvalue()


class PackageIndex(ServedApp):
    """`/simple/` (PEP 503) with one project, `/redirect?to=URL`, `/blob?bytes=N`, `/hello`, `/echo-host`."""

    def __init__(self, name: str = "tinypkg", version: str = "1.0", value: str = "egress-ok") -> None:
        self.name = name
        self.wheel_name, self.wheel = build_wheel(name, version, f"VALUE = {value!r}\n")
        self.requests: list[str] = []
        super().__init__(Starlette(routes=self._routes()))

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def simple_url(self) -> str:
        return f"{self.url}/simple/"

    def _routes(self) -> list[Route]:
        digest = hashlib.sha256(self.wheel).hexdigest()

        async def root(request: Request) -> Response:
            self.requests.append(request.url.path)
            return HTMLResponse(f'<html><body><a href="/simple/{self.name}/">{self.name}</a></body></html>')

        async def project(request: Request) -> Response:
            self.requests.append(request.url.path)
            if request.path_params["project"] != self.name:
                return PlainTextResponse("no such project", status_code=404)
            link = f'<a href="/files/{self.wheel_name}#sha256={digest}">{self.wheel_name}</a>'
            return HTMLResponse(f"<html><body>{link}</body></html>")

        async def wheel(request: Request) -> Response:
            self.requests.append(request.url.path)
            return Response(self.wheel, media_type="application/octet-stream")

        async def redirect(request: Request) -> Response:
            self.requests.append(request.url.path)
            return RedirectResponse(request.query_params["to"], status_code=302)

        async def blob(request: Request) -> Response:
            size = int(request.query_params.get("bytes", "1024"))
            return Response(b"x" * size, media_type="application/octet-stream")

        async def hello(request: Request) -> Response:
            self.requests.append(request.url.path)
            return PlainTextResponse("hello through the proxy\n")

        async def echo_host(request: Request) -> Response:
            return PlainTextResponse(request.headers.get("host", "") + "\n")

        return [
            Route("/echo-host", echo_host),
            Route("/simple/", root),
            Route("/simple/{project}/", project),
            Route(f"/files/{self.wheel_name}", wheel),
            Route("/redirect", redirect),
            Route("/blob", blob),
            Route("/hello", hello),
        ]
