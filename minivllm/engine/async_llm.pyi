"""Requests reach the scheduler through ZMQ: a front end tokenises and streams, `EngineCoreProc` runs `run_busy_loop` in another process."""
from __future__ import annotations
import asyncio, atexit, concurrent.futures, gc, itertools, logging, math, multiprocessing, pickle
import queue
import os, shutil, signal, tempfile, threading, time, traceback, uuid
from dataclasses import asdict, fields, replace
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, AsyncIterator, Callable
from unittest import mock
import msgpack, zmq
from fastcore.basics import patch
from ..request import Request, RequestStatus
from ..sampling_params import SamplingParams
from ..core.sched.output import EngineCoreOutput, LogprobsLists, PrefixCacheStats, SchedulerStats
from ..metrics.loggers import StatLogger
from ..metrics.reader import Metric
from ..metrics.stats import IterationStats
from .arg_utils import EngineArgs
from .core import EngineCore, EngineInfo, build_engine_core, load_tokenizer, resolve_device, resolve_model_path, try_get_generation_config
from ..platforms.cpu import engine_process_env
from ..usage.usage_lib import UsageContext
from .output_processor import OutputProcessor
from ..outputs import RequestOutput
from ..sampling_params import RequestOutputKind
from ..inputs.llm import TextPrompt, TokensPrompt, parse_prompt
from .input_processor import check_prompt, check_sampling_params, fan_out, prepare_sampling_params
__all__ = ['POLL_INTERVAL_MS', 'MAX_FAILED_STEPS', 'OUTPUT_LINGER_MS', 'HEARTBEAT_INTERVAL_S', 'HEARTBEAT_TIMEOUT_S', 'MAX_LOGPROBS', 'MAX_N', 'log', 'INT64_MIN', 'INT64_MAX', 'FLOAT_FIELDS', 'INT_FIELDS', 'EngineCoreRequestType', 'EngineDeadError', 'EngineRequestError', 'bind_socket', 'params_to_wire', 'params_from_wire', 'request_to_wire', 'request_from_wire', 'output_to_wire', 'output_from_wire', 'encode_request', 'decode_request', 'EngineCoreProc', 'decode_or_error', 'make_engine_core', 'run_engine_core', 'RequestOutputCollector', 'AsyncLLM', 'stats_from_wire', 'check_request_params']

class EngineCoreRequestType(bytes, Enum):
    """First frame of a front end -> engine message (vLLM's `EngineCoreRequestType`; SHUTDOWN: ours)."""
    ADD = b'\x00'
    ABORT = b'\x01'
    UTILITY = b'\x03'
    SHUTDOWN = b'\x05'

class EngineDeadError(RuntimeError):
    """The engine process failed, exited or froze; the message has its traceback when it sent one."""

class EngineRequestError(RuntimeError):
    """The engine failed while running this one request; the engine itself lives on."""

def bind_socket(ctx: zmq.Context, kind: int, transport: str, ipc_dir: str | None) -> tuple[zmq.Socket, str]:
    """A socket bound to a fresh loopback address: `ipc://` in `ipc_dir`, or `tcp://127.0.0.1:*`."""
    ...

def params_to_wire(sp: SamplingParams) -> dict:
    """`SamplingParams` as a dict of plain values (an enum field travels as its value)."""
    ...

def params_from_wire(d: dict) -> SamplingParams:
    """Rebuild `SamplingParams`; enum fields are recognised by their default's type."""
    ...

def request_to_wire(r: Request) -> list:
    """An ADD payload: the fields the engine needs to rebuild the `Request`."""
    ...

def request_from_wire(x: list) -> Request:
    """Rebuild the `Request` of an ADD payload (in the engine's input thread)."""
    ...

def _lists_to_wire(x: LogprobsLists | None) -> list | None:
    ...

def output_to_wire(o: EngineCoreOutput) -> list:
    """One `EngineCoreOutput` as a list."""
    ...

def output_from_wire(x: list) -> EngineCoreOutput:
    """Rebuild an `EngineCoreOutput` (in the front end's output thread)."""
    ...

def encode_request(request_type: EngineCoreRequestType, payload) -> list[bytes]:
    """The two frames of a front end -> engine message."""
    ...

def decode_request(frames: list[bytes]) -> tuple[EngineCoreRequestType, Any]:
    """Frames -> `(request_type, payload)`; an ADD payload is already turned into a `Request`."""
    ...

class EngineCoreProc:
    """The engine core as a server: an input thread fills `input_queue`, `run_busy_loop` steps."""

    def __init__(self, input_address: str, output_address: str, make_engine_core: Callable[[], EngineCore]):
        ...

    def send(self, **message) -> None:
        """Send one output message (main thread only: ZMQ sockets are not thread-safe)."""
        ...

    def process_input_sockets(self: EngineCoreProc, ready_info: EngineInfo) -> None:
        """Input thread: handshake, then decode messages into `input_queue` (SHUTDOWN if parent dies)."""
        ...

    def run_busy_loop(self: EngineCoreProc) -> None:
        """Core busy loop: process the input queue, then one engine step, until SHUTDOWN."""
        ...

    def _process_input_queue(self: EngineCoreProc) -> None:
        """Block while the scheduler has no work; then drain everything that already arrived."""
        ...

    def _process_engine_step(self: EngineCoreProc) -> None:
        """One `EngineCore.step()`; its outputs go out. A failed step fails its new requests (only)."""
        ...

    def _recover_from_failed_step(self: EngineCoreProc, running_before: set[str], error: Exception) -> None:
        """Fail the requests new in the failed step (all of them if none was new); restart the others."""
        ...

    def _handle_client_request(self: EngineCoreProc, request_type: EngineCoreRequestType, request: Any) -> None:
        """Dispatch one request from the front end (vLLM's `_handle_client_request`)."""
        ...

    def _handle_utility(self: EngineCoreProc, call_id: int, method: str, args: list) -> None:
        """Run `self.<method>(*args)` for the front end and send `[call_id, ok, result]` back."""
        ...

    def get_stats(self: EngineCoreProc) -> dict:
        """Queue lengths and KV-cache occupancy, read from the scheduler."""
        ...

    def reset_prefix_cache(self: EngineCoreProc) -> bool:
        """Forget every cached block (False while requests still hold blocks)."""
        ...

    def get_timeline(self: EngineCoreProc) -> bytes | None:
        """The attached `TimelineRecorder`'s settings and records, pickled (None without a recorder)."""
        ...

    def send_heartbeats(self: EngineCoreProc) -> None:
        """Heartbeat thread: `{heartbeat: step_counter}` every `HEARTBEAT_INTERVAL_S`, own socket."""
        ...

    def run(self: EngineCoreProc) -> bool:
        """Build the engine, handshake, run the busy loop; report a failure. True on a clean exit."""
        ...
POLL_INTERVAL_MS = 100

def _parent_is_dead() -> bool:
    """True when this process was spawned and its parent has exited."""
    ...

def decode_or_error(frames: list[bytes]) -> tuple[EngineCoreRequestType, Any]:
    """`decode_request`, or an ADD whose payload is the `ValueError` that its request id gets back."""
    ...
MAX_FAILED_STEPS = 3
OUTPUT_LINGER_MS = 2000
HEARTBEAT_INTERVAL_S = 0.5

def make_engine_core(engine_args: EngineArgs, eos_token_id: int | None=None, record_timeline: bool=False, usage_context: UsageContext=UsageContext.ENGINE_CONTEXT) -> EngineCore:
    """The engine process's `EngineCore` (`build_engine_core`), with a timeline recorder when asked."""
    ...

def run_engine_core(input_address: str, output_address: str, engine_args: EngineArgs, eos_token_id: int | None=None, record_timeline: bool=False, usage_context: UsageContext=UsageContext.ENGINE_CONTEXT) -> None:
    """Body of the engine process: serve an `EngineCoreProc` until SHUTDOWN; exit code 1 on failure."""
    ...

class RequestOutputCollector:
    """The queue one request's outputs arrive in, from any thread; an error put here ends the stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        ...

    def put(self, item: RequestOutput | Exception) -> None:
        """Queue the next output, or the error that ends the stream (dropped if the loop is closed)."""
        ...

    async def get(self) -> RequestOutput:
        """The next output (waits), or raise the error that ended the stream."""
        ...
HEARTBEAT_TIMEOUT_S = 5.0
MAX_LOGPROBS = 20
MAX_N = 128
log = logging.getLogger('minivllm')

class AsyncLLM:
    """Streaming front end: tokenise, send to an `EngineCoreProc` process, yield `RequestOutput`s."""

    def __init__(self, model: str | Path | None=None, *, transport: str='ipc', startup_timeout: float=600, record_timeline: bool=False, heartbeat_timeout: float=HEARTBEAT_TIMEOUT_S, engine_stall_timeout: float | None=None, max_logprobs: int=MAX_LOGPROBS, usage_context: UsageContext=UsageContext.ENGINE_CONTEXT, **engine_kwargs):
        ...

    @property
    def max_model_len(self) -> int:
        """The engine's `max_model_len` (from the handshake)."""
        ...

    @property
    def num_requests_in_flight(self) -> int:
        """Engine requests this front end still waits for (a request with `n > 1` counts `n`)."""
        ...

    def check_health(self) -> None:
        """Raise the `EngineDeadError` once the engine died (vLLM's `check_health`)."""
        ...

    def stalled_for(self) -> float | None:
        """Seconds the engine has been silent, once that is past `heartbeat_timeout`; else None."""
        ...

    def get_tokenizer(self):
        """The Hugging Face tokenizer (`None` for a folder without one)."""
        ...

    def _start_engine(self: AsyncLLM, transport: str, engine_process_args: tuple, timeout: float) -> None:
        """Bind the sockets, spawn the engine process and wait for its handshake."""
        ...

    def _wait_for_handshake(self: AsyncLLM, timeout: float) -> tuple[bytes, EngineInfo]:
        """The engine's identity and info, or `EngineDeadError` with its traceback if it died first."""
        ...

    def _process_outputs(self: AsyncLLM) -> None:
        """Output thread: dispatch every message from the engine until shutdown or engine death."""
        ...

    def _heard(self: AsyncLLM) -> None:
        """A message from the engine: it lives; a stall the log reported is over."""
        ...

    def _stalled(self: AsyncLLM, silent: float) -> None:
        """The engine is silent: say so once; past `engine_stall_timeout` (if set) it is dead."""
        ...

    def get_metrics(self: AsyncLLM) -> list[Metric]:
        """vLLM's metrics so far (`LLM.get_metrics`' snapshot): what `/metrics` shows."""
        ...

    def _dispatch(self: AsyncLLM, message: dict) -> None:
        """Route one output message: outputs, per-request errors, stats, utility results, engine death."""
        ...

    def _reject(self: AsyncLLM, request_id: str, error: Exception) -> None:
        """End the stream behind engine request `request_id` with `error`; abort its siblings."""
        ...

    def _fail(self: AsyncLLM, error: EngineDeadError) -> None:
        """The engine is dead: every open stream and pending utility call gets `error`."""
        ...

    def tokenize_prompt(self: AsyncLLM, prompt: str | list[int]) -> list[int]:
        """Token ids of a text or token-id prompt, checked against the vocabulary and `max_model_len`."""
        ...

    def _send(self: AsyncLLM, request_type: EngineCoreRequestType, payload) -> None:
        """Send one message to the engine (any thread)."""
        ...

    def _send_frames(self: AsyncLLM, frames: list[bytes]) -> None:
        """Send already encoded frames to the engine (any thread)."""
        ...

    def abort(self: AsyncLLM, request_id: str | list[str]) -> None:
        """Abort requests (and their `n` children): end their streams, finish them in the engine."""
        ...

    def call_utility(self: AsyncLLM, method: str, *args) -> concurrent.futures.Future:
        """Call `EngineCoreProc.<method>(*args)` in the engine process; a future of its result."""
        ...

    def get_timeline(self: AsyncLLM, timeout: float=30):
        """The engine's `TimelineRecorder` (started with `record_timeline=True`), copied to this process."""
        ...

    def shutdown(self: AsyncLLM, timeout: float=10) -> None:
        """Stop the engine process (SHUTDOWN, then terminate if need be), close the sockets; idempotent."""
        ...

    def __enter__(self: AsyncLLM):
        ...

    def __exit__(self: AsyncLLM, *exc):
        ...

def stats_from_wire(d: dict | None) -> SchedulerStats | None:
    """Rebuild the `SchedulerStats` of a step (sent as a dict)."""
    ...
INT64_MIN, INT64_MAX = (-2 ** 63, 2 ** 63 - 1)
FLOAT_FIELDS = ('temperature', 'top_p', 'min_p', 'presence_penalty', 'frequency_penalty', 'repetition_penalty')
INT_FIELDS = ('n', 'seed', 'max_tokens', 'min_tokens', 'logprobs', 'prompt_logprobs')

def check_request_params(params: SamplingParams, vocab_size: int, max_logprobs: int=MAX_LOGPROBS, max_n: int=MAX_N) -> SamplingParams:
    """What reaches tensors and the wire, bounded: `ValueError` naming the field; `top_k` clamped."""
    ...

@patch
async def add_request(self: AsyncLLM, request_id: str, prompt: str | list[int] | TextPrompt | TokensPrompt, sampling_params: SamplingParams | None=None, *, priority: int=0, output_kind: RequestOutputKind | None=None) -> RequestOutputCollector:
    """Validate, register and send one request (`n` engine requests); the collector of its outputs."""
    ...

@patch
async def stream_outputs(self: AsyncLLM, request_id: str, collector: RequestOutputCollector) -> AsyncIterator[RequestOutput]:
    """The outputs of an added request until it finishes; aborts it if the consumer stops early."""
    ...

@patch
async def generate(self: AsyncLLM, prompt: str | list[int] | TextPrompt | TokensPrompt, sampling_params: SamplingParams | None=None, request_id: str | None=None, *, priority: int=0, output_kind: RequestOutputKind | None=None) -> AsyncIterator[RequestOutput]:
    """Stream `RequestOutput`s for one prompt as tokens are sampled; aborts the request if abandoned."""
    ...

@patch
async def get_stats(self: AsyncLLM) -> dict:
    """Queue lengths, KV usage and free blocks of the engine."""
    ...
