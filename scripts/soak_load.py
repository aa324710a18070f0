"""The client side of scripts/soak.py: the concurrent streams, what they send, and the Ledger
that judges every outcome.

Load runs N stream coroutines, a keeper of shared sessions and a killer of child processes on
one asyncio event loop (grpc.aio), all writing to one Ledger; nothing here is touched from
another thread. The child (`soak.py --child ADDRESS SID`, run_child below) is a separate
process so that it can be SIGKILLed with streams open: the server sees its connection vanish.
"""

import asyncio
import math
import os
import random
import sys
import time

import grpc

from mnemo_client._stubs import (
    generation_pb2, generation_pb2_grpc, sessions_pb2, sessions_pb2_grpc)

NORMAL_TIMEOUT_S = 120.0
STREAMS_PER_SHARED_SESSION = 8  # shared sessions: one per 8 streams (calls on one queue up)
CHANNELS = 8
SESSION_HEADER = "x-mnemo-session"
FINISHED = (generation_pb2.FINISH_REASON_LENGTH, generation_pb2.FINISH_REASON_STOP,
            generation_pb2.FINISH_REASON_EOS)
OPENING_DISCONNECTS = 2  # streams whose first call is a disconnect, whatever the draw
MODES = (("normal", 0.72), ("deadline", 0.12), ("cancel", 0.12), ("disconnect", 0.04))
# The codes each mode may end with, before the session rules and the limits.
MODE_CODES = {"normal": {"OK"}, "deadline": {"OK", "DEADLINE_EXCEEDED"},
              "cancel": {"OK", "CANCELLED"}, "disconnect": {"OK", "CANCELLED"}}
# The driver; `soak.py --child` runs run_child.
SOAK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "soak.py")
WORDS = ("def class return import self value index memory session token stream window yield "
         "async await lambda None True False for while if else try except with open print "
         "list dict tuple range len append items keys segment cache ring anchor").split()


class SessionState:
    def __init__(self):
        self.created = False          # CreateSession returned OK
        self.create_cut = False       # CreateSession was cut short by this driver
        self.deletes = []             # [sent_at, outcome or None while in flight]
        self.inflight = 0             # driver calls running on it
        # Calls the driver cut short (rpc, when) that the server may still be running: calls
        # on a session run one at a time in arrival order, so an OK call sent after them
        # proves them done and clears them.
        self.cuts = []
        self.tokens = 0               # tokens the driver sent or received on it


class Ledger:
    """Every call's outcome, by RPC, mode and code; what was unexpected, and why."""

    def __init__(self, limits, busy_grace):
        self.limits = limits
        self.busy_grace = busy_grace
        self.sessions = {}
        self.codes = {}               # rpc -> code -> n
        self.by_mode = {}             # mode -> code -> n
        self.unexpected = []          # the first 100
        self.unexpected_total = 0
        self.anomalies = []           # OK answers that break the API's promises
        self.excused = {"NOT_FOUND": 0, "FAILED_PRECONDITION": 0, "RESOURCE_EXHAUSTED": 0}
        self.latency = {}             # rpc -> seconds of OK calls in normal mode
        self.calls = 0
        self.tokens = 0
        self.slow_deadlines = 0       # calls that hit the 120 s deadline
        self.kills = {"children": 0, "mid_stream": 0, "release_s_max": 0.0}
        # After a delete refused as busy while no driver call ran on the session: cut-short
        # call -> session deletable (s), by the kind of call that was cut.
        self.release_lag = {}

    def session(self, sid):
        return self.sessions.setdefault(sid, SessionState())

    def _expected(self, rpc, mode, code, details, sid, sent_at, end_at, inflight_at_send,
                  delete_entry):
        if code in MODE_CODES[mode]:
            return True
        if code == "DEADLINE_EXCEEDED" and mode != "deadline":
            self.slow_deadlines += 1  # the 120 s deadline: slow under this load, not wrong
            return True
        if self.limits and (code == "RESOURCE_EXHAUSTED" or (
                code == "NOT_FOUND" and "evicted as least recently used" in details)):
            return True  # the server's limits at work (docs/api.md: CreateSession, GetSession)
        st = self.sessions.get(sid) if sid else None
        if st is None:
            return False
        if code == "NOT_FOUND":
            # A DeleteSession of this driver (not the call being judged) was sent before this
            # call ended and may have gone through.
            return st.create_cut or any(
                entry is not delete_entry and entry[0] <= end_at
                and entry[1] in (None, "OK", "CANCELLED", "DEADLINE_EXCEEDED")
                for entry in st.deletes)
        if code == "FAILED_PRECONDITION" and rpc == "DeleteSession":
            # Busy: a call of this driver runs on it, or one it cut short may still run. A cut
            # Generate or Score must stop within busy_grace (the server checks between steps).
            return inflight_at_send > 0 or any(sent_at - t <= self.busy_grace for _, t in st.cuts)
        return False

    def record(self, rpc, mode, code, details, sid="", sent_at=0.0, end_at=0.0,
               inflight_at_send=0, delete_entry=None):
        self.calls += 1
        self.codes.setdefault(rpc, {}).setdefault(code, 0)
        self.codes[rpc][code] += 1
        self.by_mode.setdefault(mode, {}).setdefault(code, 0)
        self.by_mode[mode][code] += 1
        ok = self._expected(rpc, mode, code, details, sid, sent_at, end_at, inflight_at_send,
                            delete_entry)
        st = self.sessions.get(sid) if sid else None
        if st and code in ("CANCELLED", "DEADLINE_EXCEEDED") and rpc.startswith(("Generate",
                                                                                  "Score")):
            st.cuts.append((rpc, end_at))
        elif st and code == "OK" and rpc not in ("DeleteSession", "GetSession"):
            st.cuts = [(cut, t) for cut, t in st.cuts if t >= sent_at]
        if ok and code in self.excused:
            self.excused[code] += 1
        if ok and code == "OK" and mode == "normal":
            lat = self.latency.setdefault(rpc, [])
            if len(lat) < 20000:
                lat.append(end_at - sent_at)
        if not ok:
            self.unexpected_total += 1
            if len(self.unexpected) < 100:
                self.unexpected.append({"rpc": rpc, "mode": mode, "code": code,
                                        "message": details, "session": sid,
                                        "t": round(end_at, 3)})
                print(f"[soak] UNEXPECTED {rpc} ({mode}{', ' + sid if sid else ''}): "
                      f"{code}: {details}", file=sys.stderr, flush=True)

    def anomaly(self, what):
        if len(self.anomalies) < 100:
            self.anomalies.append(what)
            print(f"[soak] ANOMALY {what}", file=sys.stderr, flush=True)

    def code_totals(self):
        totals = {}
        for per_code in self.codes.values():
            for code, n in per_code.items():
                totals[code] = totals.get(code, 0) + n
        return totals


# --- the load --------------------------------------------------------------------------------

def _raw(data):
    """Identity (de)serializer for calls made below the stubs."""
    return data


def text(rng, lo, hi):
    n = rng.randint(lo, hi)
    words = [rng.choice(WORDS) for _ in range(max(1, n // 5))]
    return (" ".join(words) + "\n")[:max(1, n)]


def pick_mode(rng, stream):
    r, acc = rng.random(), 0.0
    for mode, weight in MODES:
        acc += weight
        if r < acc:
            return mode if (mode != "disconnect" or stream) else "cancel"
    return "normal"


class Load:
    """The stream coroutines, the shared-session keeper, the child killer and the half-open
    calls, sharing one Ledger."""

    def __init__(self, address, ledger, rng, stop_at, prefix, streams):
        self.address = address
        self.ledger = ledger
        self.rng = rng
        self.stop_at = stop_at
        self.prefix = prefix
        self.channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
        self.pool = [None] * max(4, streams // STREAMS_PER_SHARED_SESSION)
        self.serial = 0
        self.inflight = 0
        self._closing = set()

    def stopping(self):
        return time.monotonic() >= self.stop_at

    def new_sid(self, kind):
        self.serial += 1
        return f"{self.prefix}-{kind}-{self.serial}"

    async def call(self, rpc, method, request, mode, sid="", stream=False, channel=None,
                   max_tokens=0, delete_entry=None, cut_after=None):
        """One call in `mode`; records it and returns (code, response or None unless OK). A
        cancelled or disconnected stream is cut after `cut_after` chunks (default: 0-8, 0 =
        on a timer before the first)."""
        rng = self.rng
        timeout = (10 ** rng.uniform(-2.7, -0.5)) if mode == "deadline" else NORMAL_TIMEOUT_S
        metadata = ((SESSION_HEADER, sid),) if sid else None
        st = self.ledger.session(sid) if sid else None
        inflight_at_send = st.inflight if st else 0
        if st:
            st.inflight += 1
        self.inflight += 1
        sent_at = time.monotonic()
        loop = asyncio.get_running_loop()
        handle = None
        call = method(request, timeout=timeout, metadata=metadata)
        cut = False
        response, tokens, last = None, 0, None
        try:
            if stream:
                if cut_after is None:
                    cut_after = rng.randint(0, 8) if mode in ("cancel", "disconnect") else -1
                if cut_after == 0:
                    handle = loop.call_later(rng.uniform(0, 0.2), self._cut, call, channel)
                chunks = 0
                async for chunk in call:
                    chunks += 1
                    tokens += len(chunk.tokens)
                    last = chunk
                    if chunks == cut_after:
                        cut = True
                        self._cut(call, channel)
                response = last
            else:
                if mode == "cancel":
                    handle = loop.call_later(rng.uniform(0, 0.03), call.cancel)
                response = await call
        except asyncio.CancelledError:
            if not (mode in ("cancel", "disconnect") and call.cancelled()):
                raise  # the driver itself is being cancelled
        except grpc.aio.AioRpcError:
            pass
        finally:
            if handle:
                handle.cancel()
            if st:
                st.inflight -= 1
                st.tokens += tokens
            self.inflight -= 1
            if channel is not None:
                await channel.close()
        code = (await call.code()).name
        details = await call.details()
        end_at = time.monotonic()
        self.ledger.tokens += tokens
        self.ledger.record(rpc, mode, code, details, sid, sent_at, end_at, inflight_at_send,
                           delete_entry)
        if stream and code == "OK":
            self._check_stream(rpc, last, tokens, max_tokens, cut)
        return code, (response if code == "OK" else None)

    def _cut(self, call, channel):
        if channel is not None:  # the disconnect: the connection closes under the stream
            closing = asyncio.ensure_future(channel.close())
            self._closing.add(closing)  # a task nobody holds may be collected before it runs
            closing.add_done_callback(self._closing.discard)
        else:
            call.cancel()

    def _check_stream(self, rpc, last, tokens, max_tokens, cut):
        if cut:
            return
        if last is None or last.finish_reason not in FINISHED:
            self.ledger.anomaly(f"{rpc}: OK stream without a finish reason "
                                f"({last.finish_reason if last else 'no chunk'})")
        elif last.usage.generated_tokens != tokens or tokens > max_tokens:
            self.ledger.anomaly(f"{rpc}: usage.generated_tokens {last.usage.generated_tokens}, "
                                f"{tokens} tokens arrived, max_new_tokens {max_tokens}")

    # Individual operations. `ch` is a channel of the shared set.

    async def generate(self, ch, sid, mode, max_tokens=None, cut_after=None):
        rng = self.rng
        max_tokens = max_tokens or rng.choice((1, 8, 32, 64, 128))
        request = generation_pb2.GenerateRequest(
            session_id=sid, prompt=text(rng, 1, 200), max_new_tokens=max_tokens)
        request.sampling.temperature = rng.choice((0.0, 0.7, 1.0))
        request.sampling.seed = rng.randrange(1 << 30)
        if rng.random() < 0.2:
            request.stop.append("\n")
        own = grpc.aio.insecure_channel(self.address) if mode == "disconnect" else None
        stub = generation_pb2_grpc.GenerationStub(own or ch)
        rpc = "Generate.session" if sid else "Generate.oneshot"
        await self.call(rpc, stub.Generate, request, mode, sid, stream=True, channel=own,
                        max_tokens=max_tokens, cut_after=cut_after)

    async def score(self, ch, sid, mode):
        rng = self.rng
        big = rng.random() < 0.1  # past --max_prefill_tokens: a prefill split over iterations
        request = generation_pb2.ScoreRequest(
            session_id=sid, text=text(rng, 2, 2000 if big else 400),
            update_memory=bool(sid) and rng.random() < 0.5, token_logprobs=rng.random() < 0.3)
        _, r = await self.call("Score.session" if sid else "Score.oneshot",
                               generation_pb2_grpc.GenerationStub(ch).Score, request, mode, sid)
        if r is not None and (r.token_count <= 0 or not math.isfinite(r.bits_per_byte)):
            self.ledger.anomaly(f"Score: token_count {r.token_count}, bpb {r.bits_per_byte}")
        if r is not None and request.update_memory:
            self.ledger.session(sid).tokens += r.token_count

    async def tokenize(self, ch, mode):
        """Tokenize, then Detokenize what came back: the text must come back whole."""
        t = text(self.rng, 1, 200)
        stub = generation_pb2_grpc.GenerationStub(ch)
        _, r = await self.call("Tokenize", stub.Tokenize,
                               generation_pb2.TokenizeRequest(text=t), mode)
        if r is None:
            return
        _, back = await self.call("Detokenize", stub.Detokenize,
                                  generation_pb2.DetokenizeRequest(ids=r.ids), "normal")
        if back is not None and back.text != t:
            self.ledger.anomaly(f"Detokenize(Tokenize({t!r})) = {back.text!r}")

    async def get_session(self, ch, sid, mode):
        _, r = await self.call("GetSession", sessions_pb2_grpc.SessionsStub(ch).GetSession,
                               sessions_pb2.GetSessionRequest(session_id=sid), mode, sid)
        if r is not None and r.session_id != sid:
            self.ledger.anomaly(f"GetSession({sid}) answered {r.session_id}")

    async def create(self, ch, kind, mode="normal"):
        sid = self.new_sid(kind)
        st = self.ledger.session(sid)
        request = sessions_pb2.CreateSessionRequest(
            session_id=sid, knn_capacity=self.rng.choice((0, 1024, 4096)))
        _, r = await self.call("CreateSession", sessions_pb2_grpc.SessionsStub(ch).CreateSession,
                               request, mode, sid)
        st.created = r is not None
        if r is None:
            st.create_cut = True
            await self.delete(ch, sid)  # it may exist all the same
            return None
        return sid

    async def delete(self, ch, sid, mode="normal", once=False, give_up_s=NORMAL_TIMEOUT_S + 30):
        """DeleteSession until it is gone (or once); a session still busy after give_up_s is a
        failure (every call on it has ended by then: they all have NORMAL_TIMEOUT_S)."""
        st = self.ledger.session(sid)
        start, pause, refused = time.monotonic(), 0.05, False
        while True:
            entry = [time.monotonic(), None]
            st.deletes.append(entry)
            entry[1], _ = await self.call(
                "DeleteSession", sessions_pb2_grpc.SessionsStub(ch).DeleteSession,
                sessions_pb2.DeleteSessionRequest(session_id=sid), mode, sid,
                delete_entry=entry)
            if entry[1] in ("OK", "NOT_FOUND") or mode != "normal" or once:
                if entry[1] == "OK" and refused and st.cuts:
                    # What held it: a cut Score if there was one, else Generates.
                    kinds = {cut.split(".")[0] for cut, _ in st.cuts}
                    kind = "Score" if "Score" in kinds else "+".join(sorted(kinds))
                    lag = self.ledger.release_lag.setdefault(kind, [0, 0.0])
                    lag[0] += 1
                    lag[1] = max(lag[1], round(time.monotonic() - st.cuts[-1][1], 3))
                return entry[1]
            refused = refused or st.inflight == 0  # busy with nothing of the driver's running
            if entry[1] != "FAILED_PRECONDITION" or time.monotonic() - start > give_up_s:
                if entry[1] == "FAILED_PRECONDITION":
                    self.ledger.anomaly(f"session {sid} still busy {give_up_s:.0f} s after the "
                                        f"driver's last call on it")
                return entry[1]
            await asyncio.sleep(pause)
            pause = min(1.0, pause * 2)

    async def stream(self, index):
        """One of the N concurrent streams: calls until the end of the run. Even streams own a
        session (calls that name it); odd ones send those calls one-shot."""
        rng = random.Random(self.rng.random())
        ch = self.channels[index % CHANNELS]
        own, budget = None, 0
        if index < OPENING_DISCONNECTS:
            # Disconnects are 4% of the streams, too few to count on in a short run against a
            # slow server (a sanitizer build): the first streams open with one, cut after the
            # first of 128 tokens, so every drill has some whatever its throughput.
            await self.generate(ch, "", "disconnect", max_tokens=128, cut_after=1)
        while not self.stopping():
            if index % 2 == 0 and own is None:
                own = await self.create(ch, f"w{index}")
                budget = rng.randint(100, 800)  # tokens; then the session is replaced
                continue
            mode, unary = pick_mode(rng, stream=True), pick_mode(rng, stream=False)
            shared = rng.choice(self.pool) or ""
            r = rng.random()
            if r < 0.25:
                await self.generate(ch, "", mode)
            elif r < 0.45:
                await self.generate(ch, own or "", mode)
            elif r < 0.53:
                await self.score(ch, "", unary)
            elif r < 0.61:
                await self.score(ch, own or "", unary)
            elif r < 0.69:
                await self.tokenize(ch, unary)
            elif r < 0.75 and own:
                await self.get_session(ch, own, unary)
            elif r < 0.83:
                await self.generate(ch, shared, mode)
            elif r < 0.88:
                await self.score(ch, shared, unary)
            elif r < 0.93 and shared:
                await self.get_session(ch, shared, unary)
            elif r < 0.94:
                await self.call("ListSessions", sessions_pb2_grpc.SessionsStub(ch).ListSessions,
                                sessions_pb2.ListSessionsRequest(page_size=50), "normal")
            elif r < 0.97:  # a throwaway session: created, used, deleted, each call maybe cut
                sid = await self.create(ch, "t", unary)
                if sid:
                    await self.generate(ch, sid, mode)
                    await self.delete(ch, sid)
            elif own:  # the session's lifetime ends early
                budget = 0
            if own and (budget <= 0 or self.ledger.session(own).tokens > budget):
                await self.delete(ch, own)
                own = None

    async def pool_keeper(self):
        """Keeps the shared sessions that every stream uses; every 0.5-2 s replaces the oldest,
        so each lives about len(pool) * 1.25 s and the sessions' memory stays stationary. Half
        the time it is first deleted while in use (calls on it may get NOT_FOUND, the delete
        FAILED_PRECONDITION); then it is retired (new calls stop picking it) and deleted for
        good once its calls are done, in the background (a busy shared session can take a
        while, and must not hold up the next replacement)."""
        ch = self.channels[0]
        for i in range(len(self.pool)):
            self.pool[i] = await self.create(ch, "pool")
        retiring = set()
        i = 0
        while not self.stopping():
            await asyncio.sleep(self.rng.uniform(0.5, 2.0))
            i = (i + 1) % len(self.pool)
            old = self.pool[i]
            if old is not None:
                if self.rng.random() < 0.5:
                    await self.delete(ch, old, once=True)
                self.pool[i] = None
                task = asyncio.ensure_future(self.delete(ch, old))
                retiring.add(task)
                task.add_done_callback(retiring.discard)
            self.pool[i] = await self.create(ch, "pool")
        await asyncio.gather(*retiring)

    async def killer(self, interval):
        """Children holding three streams (one on a session), SIGKILLed mid-stream; then the
        session must become deletable (the server noticed the dead connection)."""
        ch = self.channels[1]
        while not self.stopping():
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * interval)
            sid = await self.create(ch, "child")
            if sid is None or self.stopping():
                continue
            st = self.ledger.session(sid)
            st.inflight += 1  # the child's stream: a delete before the kill may fail
            child = await asyncio.create_subprocess_exec(
                sys.executable, SOAK, "--child", self.address, sid,
                stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
            try:
                try:
                    line = await asyncio.wait_for(child.stdout.readline(), timeout=60)
                except asyncio.TimeoutError:
                    line = b""
                if line.startswith(b"streaming"):
                    await asyncio.sleep(self.rng.uniform(0.0, 0.5))
                    self.ledger.kills["mid_stream"] += 1
            finally:
                child.kill()
                await child.wait()
            self.ledger.kills["children"] += 1
            killed_at = time.monotonic()
            st.inflight -= 1
            st.cuts.append(("Generate.child", killed_at))
            if await self.delete(ch, sid) == "OK":
                self.ledger.kills["release_s_max"] = max(self.ledger.kills["release_s_max"],
                                                         time.monotonic() - killed_at)

    async def half_open(self, interval):
        """Calls whose client goes away after the headers, before sending its request (HTTP/2
        HEADERS, then RST_STREAM): the server must not run them. The client sees CANCELLED; the
        server should count CANCELLED and create nothing (checked from its metrics and from the
        sessions left at the end)."""
        methods = (("CreateSession", "/mnemo.v1.Sessions/CreateSession", False),
                   ("Score", "/mnemo.v1.Generation/Score", False),
                   ("Generate", "/mnemo.v1.Generation/Generate", True))
        ch = self.channels[2 % CHANNELS]
        while not self.stopping():
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * interval)
            rpc, path, streaming = self.rng.choice(methods)
            never = asyncio.Event()

            async def no_request():
                await never.wait()
                yield b""

            open_call = (ch.stream_stream if streaming else ch.stream_unary)(
                path, request_serializer=_raw, response_deserializer=_raw)
            sent_at = time.monotonic()
            call = open_call(no_request(), timeout=NORMAL_TIMEOUT_S)
            await asyncio.sleep(self.rng.uniform(0.05, 0.3))
            call.cancel()
            try:
                if streaming:
                    async for _ in call:
                        pass
                else:
                    await call
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass
            self.ledger.record(f"{rpc}.no_request", "cancel", (await call.code()).name,
                               await call.details(), "", sent_at, time.monotonic())

    async def cleanup(self):
        """Deletes every session this driver may have left; returns what is left of ours."""
        ch = self.channels[0]
        for sid, st in list(self.ledger.sessions.items()):
            gone = any(outcome in ("OK", "NOT_FOUND") for _, outcome in st.deletes)
            if (st.created or st.create_cut) and not gone:
                await self.delete(ch, sid)
        stub = sessions_pb2_grpc.SessionsStub(ch)
        left = await stub.ListSessions(sessions_pb2.ListSessionsRequest(page_size=1000),
                                       timeout=30)
        return [s.session_id for s in left.sessions]


async def run_child(address, sid):
    """--child: three Generate streams, one on `sid`; says "streaming" once tokens flow, then
    reads until the parent kills it."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = generation_pb2_grpc.GenerationStub(channel)
        said = asyncio.Event()

        async def one(session):
            request = generation_pb2.GenerateRequest(session_id=session, prompt="def soak(",
                                                     max_new_tokens=512)
            request.sampling.temperature = 1.0
            metadata = ((SESSION_HEADER, session),) if session else None
            async for _ in stub.Generate(request, timeout=NORMAL_TIMEOUT_S, metadata=metadata):
                if not said.is_set():
                    said.set()
                    print("streaming", flush=True)

        await asyncio.gather(one(sid), one(""), one(""), return_exceptions=True)
    print("finished", flush=True)
