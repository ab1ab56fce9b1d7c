"""An HTTP server on 127.0.0.1 in a thread of the test, serving bytes the test gives it."""
import dataclasses
import http.server
import threading
from typing import Optional


@dataclasses.dataclass
class Response:
    """What the server answers for one path.

    Attributes:
        body: the bytes sent.
        content_length: the Content-Length header sent; None sends none (the
            client reads until the server closes the connection).
    """

    body: bytes
    content_length: Optional[int] = None


class Server:
    """Serves `routes` ({path: bytes or `Response`}) on 127.0.0.1; `requests` lists the paths asked for.

    A bytes route is sent with its true Content-Length; any other path is a 404.
    """

    def __init__(self):
        self.routes, self.requests = {}, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                route = server.routes.get(self.path)
                if route is None:
                    self.send_error(404, "Not Found")
                    return
                if isinstance(route, bytes):
                    route = Response(route, len(route))
                self.send_response(200)
                if route.content_length is not None:
                    self.send_header("Content-Length", str(route.content_length))
                self.end_headers()
                self.wfile.write(route.body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path=""):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
