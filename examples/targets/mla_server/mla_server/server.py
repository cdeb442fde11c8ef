"""HTTP server: OpenAI-compatible chat completions, SGLang's native /generate and profiling endpoints.

Run with `launch.sh --port N`; standard library `http.server`, one thread per connection, and a
scheduler thread that batches decode across requests.
"""

import dataclasses
import json
import logging
import os
import queue
import select
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from mla_server import tp
from mla_server.config import ServerConfig, parse_config
from mla_server.kv_pool import PoolExhausted
from mla_server.model_runner import ModelRunner
from mla_server.profiler import ProfilerController, parse_profile_options
from mla_server.protocol import (APIError, ChatRequest, CompletionRequest, GenerateRequest,
                                 ResponseBuilder, bad_request, completion_logprobs, generate_body,
                                 parse_chat_request, parse_completion_request,
                                 parse_generate_request, parse_json_object)
from mla_server.scheduler import Request, Scheduler
from mla_server.tokenizer import apply_chat_template, decode, encode
from mla_server.tp_runner import TPModelRunner, worker_loop

log = logging.getLogger("mla_server")
EVENT_POLL_S = 0.5
HTTP_POLL_S = 0.05
"""How often the HTTP loop looks for a shutdown: a stop waits for it (the library's 0.5 s took half
a second of every stop)."""


class Engine:
    """The model runner, scheduler and profiler behind the HTTP handlers."""

    def __init__(self, cfg: ServerConfig):
        self.cfg = cfg
        self.runner = (TPModelRunner if cfg.tp_size > 1 else ModelRunner)(cfg)
        self.profiler = ProfilerController(0, tp.send if cfg.tp_size > 1 else None)
        self.scheduler = Scheduler(self.runner, self.profiler, cfg.max_running,
                                   cfg.num_continuous_decode_steps)

    def new_request(self, ask: ChatRequest | GenerateRequest | CompletionRequest) -> Request:
        """Tokenize (chat: with the template), check the context length and submit (PoolExhausted → 429)."""
        if isinstance(ask, ChatRequest):
            prompt_ids, field = encode(apply_chat_template(ask.messages)), "messages"
        else:
            prompt_ids, field = ask.prompt_ids, "text" if isinstance(ask, GenerateRequest) else "prompt"
        if len(prompt_ids) + ask.max_tokens > self.cfg.context_len:
            raise bad_request(f"prompt ({len(prompt_ids)} tokens) + max_tokens ({ask.max_tokens})"
                              f" exceeds the context length {self.cfg.context_len}", field)
        req = Request(prompt_ids, ask.max_tokens, ask.temperature, ask.seed, ask.stop)
        if isinstance(ask, CompletionRequest):
            req.score_top = ask.logprobs or 0
            req.want_logprobs = ask.logprobs is not None and ask.max_tokens > 0
        try:
            self.scheduler.submit(req)
        except PoolExhausted as exc:
            raise APIError(429, str(exc), code="kv_pool_exhausted", kind="server_error") from None
        return req


class Handler(BaseHTTPRequestHandler):
    """Routes requests to the engine; every error becomes an OpenAI-style JSON body."""

    protocol_version = "HTTP/1.1"
    engine: Engine  # set on the subclass built by serve()

    def log_message(self, fmt, *args):
        log.info("%s %s", self.address_string(), fmt % args)

    def do_GET(self):
        routes = {"/health": self._health, "/v1/models": self._models,
                  "/get_server_info": self._server_info}
        self._dispatch(routes, parse_body=False)

    def do_POST(self):
        routes = {"/v1/chat/completions": self._chat, "/v1/completions": self._completions,
                  "/generate": self._generate,
                  "/start_profile": self._start_profile,
                  "/stop_profile": self._stop_profile}
        self._dispatch(routes, parse_body=True)

    def _dispatch(self, routes: dict, parse_body: bool) -> None:
        route = routes.get(self.path.split("?")[0])
        try:
            raw = self._read_body() if parse_body else None  # read first: keep-alive stays in sync
            if route is None:
                raise APIError(404, f"no route {self.command} {self.path}", code="not_found")
            if parse_body:
                route(parse_json_object(raw))
            else:
                route()
        except APIError as exc:
            self._send_json(exc.status, exc.body())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _read_body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True  # the body cannot be skipped
            raise bad_request("invalid Content-Length header") from None
        return self.rfile.read(length)

    def _send_json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _health(self):
        self._send_json(200, {"status": "ok"})

    def _models(self):
        model = {"id": self.engine.cfg.model_name, "object": "model", "created": 0,
                 "owned_by": "mla_server", "max_model_len": self.engine.cfg.context_len}
        self._send_json(200, {"object": "list", "data": [model]})

    def _server_info(self):
        runner = self.engine.runner
        graphs = sorted(runner.graph_runner.graphs) if runner.graph_runner else []
        compiled = runner.compiled
        self._send_json(200, {**dataclasses.asdict(self.engine.cfg), "cuda_graph_batch_sizes": graphs,
                              "kv_slots_free": runner.kv_pool.allocator.available(),
                              "torch_compile_batch_sizes": compiled.batch_sizes if compiled else [],
                              "torch_compile_s": compiled.compile_s if compiled else None,
                              "torch_compile_settings": compiled.settings if compiled else []})

    def _start_profile(self, body):
        self.engine.profiler.request_start(parse_profile_options(body))
        self._send_json(200, {"message": "Start profiling."})

    def _stop_profile(self, body):
        path = self.engine.profiler.request_stop()
        self._send_json(200, {"message": "Stop profiling.", "trace": path})

    def _chat(self, body):
        cfg = self.engine.cfg
        chat = parse_chat_request(body, cfg.max_tokens_limit, cfg.default_max_tokens)
        req = self.engine.new_request(chat)
        out = ResponseBuilder(cfg.model_name)
        try:
            if chat.stream:
                self._stream(req, chat, out)
            else:
                self._complete(req, out)
        finally:
            self.engine.scheduler.cancel(req)  # no-op once finished; frees slots if the client left

    def _completions(self, body):
        """OpenAI text completions; `echo` with `max_tokens: 0` scores the prompt (logprobs)."""
        cfg = self.engine.cfg
        ask = parse_completion_request(body, encode, cfg.max_tokens_limit, cfg.default_max_tokens)
        req = self.engine.new_request(ask)
        try:
            *_, last = self._events(req)
        finally:
            self.engine.scheduler.cancel(req)
        if last[0] == "error":
            raise APIError(500, last[1], kind="server_error")
        prompt_text = decode(req.prompt_ids)
        text = (prompt_text if ask.echo else "") + last[2]
        logprobs = None
        if ask.logprobs is not None and req.scores is not None:
            own, alts = req.scores
            tokens = [decode([t]) for t in req.prompt_ids]
            top = [None] + [[(decode([i]), v) for i, v in a] for a in alts]
            logprobs = completion_logprobs(tokens, [None, *own], top)
        elif req.want_logprobs:
            n = len(req.final_text())  # one token per character: the stop string's tokens cut
            kept = req.token_logprobs[:n]
            tokens = [decode([t]) for t in req.output_ids[:n]]
            logprobs = completion_logprobs(
                tokens, [own for own, _ in kept], [[(decode([i]), v) for i, v in top] for _, top in kept]
            )
        out = ResponseBuilder(cfg.model_name)
        usage = out.usage(len(req.prompt_ids), len(req.output_ids))
        self._send_json(200, out.text_completion(text, last[1], usage, logprobs))

    def _generate(self, body):
        """SGLang's native API: streamed events carry the text so far and token counts."""
        cfg = self.engine.cfg
        gen = parse_generate_request(body, encode, cfg.max_tokens_limit, cfg.default_max_tokens)
        req = self.engine.new_request(gen)
        rid = f"gen-{id(req):x}"
        try:
            if not gen.stream:
                *_, last = self._events(req)
                if last[0] == "error":
                    raise APIError(500, last[1], kind="server_error")
                self._send_json(200, generate_body(rid, last[2], len(req.prompt_ids),
                                                   len(req.output_ids), last[1]))
                return
            self._start_sse()
            text, tokens = "", 0
            for event in self._events(req):
                if event[0] == "error":
                    self._sse(APIError(500, event[1], kind="server_error").body())
                    break
                if event[0] == "token":  # counted here: the scheduler may already be further on
                    text, tokens = text + event[1], tokens + 1
                else:
                    text, tokens = event[2], len(req.output_ids)
                self._sse(generate_body(rid, text, len(req.prompt_ids), tokens,
                                        event[1] if event[0] == "finish" else None))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        finally:
            self.engine.scheduler.cancel(req)

    def _events(self, req: Request):
        """Yield the request's events; stop (and cancel) if the client disconnects."""
        while True:
            try:
                event = req.events.get(timeout=EVENT_POLL_S)
            except queue.Empty:
                if self._client_gone():
                    raise BrokenPipeError("client disconnected")
                continue
            yield event
            if event[0] != "token":
                return

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""

    def _complete(self, req: Request, out: ResponseBuilder) -> None:
        *_, last = self._events(req)
        if last[0] == "error":
            raise APIError(500, last[1], kind="server_error")
        usage = out.usage(len(req.prompt_ids), len(req.output_ids))
        self._send_json(200, out.completion(last[2], last[1], usage))

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _stream(self, req: Request, chat: ChatRequest, out: ResponseBuilder) -> None:
        self._start_sse()
        self._sse(out.chunk({"role": "assistant", "content": ""}))
        holdback = max((len(s) for s in chat.stop), default=1) - 1
        text, sent = "", 0
        for event in self._events(req):
            if event[0] == "error":
                self._sse(APIError(500, event[1], kind="server_error").body())
                break
            text = text + event[1] if event[0] == "token" else event[2]
            upto = len(text) - holdback if event[0] == "token" else len(text)
            if upto > sent:
                self._sse(out.chunk({"content": text[sent:upto]}))
                sent = upto
            if event[0] == "finish":
                self._sse(out.chunk({}, finish_reason=event[1]))
                if chat.include_usage:
                    self._sse(out.usage_chunk(out.usage(len(req.prompt_ids), len(req.output_ids))))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _sse(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


def serve(cfg: ServerConfig) -> None:
    """Bind, build the engine, serve until SIGTERM/SIGINT, then shut down cleanly."""
    try:
        httpd = ThreadingHTTPServer((cfg.host, cfg.port), Handler)
    except OSError as exc:
        sys.stderr.write(f"mla_server: error: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}\n")
        sys.exit(1)
    httpd.daemon_threads = True
    ranks = tp.launch_ranks(cfg) if cfg.tp_size > 1 else []
    if ranks:
        tp.init(cfg)
    engine = Engine(cfg)
    httpd.RequestHandlerClass = type("BoundHandler", (Handler,), {"engine": engine})
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    engine.scheduler.start()
    threading.Thread(target=httpd.serve_forever, args=(HTTP_POLL_S,), name="http", daemon=True).start()
    pool_mb = engine.runner.kv_pool.nbytes() / 2**20
    log.info("config: %s", cfg)
    log.info("KV pool: %d slots x %d layers, %.1f MiB FP8", cfg.pool_slots, cfg.layers, pool_mb)
    print(f"mla_server ready on http://{cfg.host}:{cfg.port}", flush=True)
    stop.wait()
    log.info("shutting down")
    httpd.shutdown()
    httpd.server_close()
    engine.scheduler.stop()
    if ranks:
        tp.stop_ranks(ranks)


def serve_rank(cfg: ServerConfig) -> None:
    """Ranks > 0 of --tp-size: follow rank 0's model calls until it stops them (no HTTP)."""
    tp.die_with_parent()
    tp.init(cfg)
    runner = ModelRunner(cfg)
    worker_loop(runner, ProfilerController(cfg.tp_rank))
    log.info("rank %d stopped", cfg.tp_rank)


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m mla_server.server`."""
    cfg = parse_config(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("mla_server: error: --device cuda but torch sees no CUDA device\n")
        sys.exit(1)
    if cfg.device == "cuda" and cfg.tp_size > torch.cuda.device_count():
        sys.stderr.write(f"mla_server: error: --tp-size {cfg.tp_size} but torch sees "
                         f"{torch.cuda.device_count()} CUDA device(s)\n")
        sys.exit(1)
    if cfg.tp_rank > 0:
        serve_rank(cfg)
    else:
        serve(cfg)


if __name__ == "__main__":
    main()
    # Everything is stopped: leave without the interpreter's teardown of torch (0.35 s a stop).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
