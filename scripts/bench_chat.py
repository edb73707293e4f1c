"""Chat server speed: API latency, threads/s and where the time goes, at 1, 10 and 50 concurrent threads.

The server is the real app (FastAPI + uvicorn on 127.0.0.1, SQLite, Z3 checks on the shipped
pricing policy); only the model is scripted and fast, so the numbers measure the chatbot, not
a model. Half of the questions start with a wrong answer and go through one rewrite.

The server runs in its own process (as `awarl chat serve` does); each client thread submits a
thread (POST /api/chat) and polls GET /api/thread/{id} every ``--poll`` seconds until it completes,
then submits the next. Baseline, same run: the same threads through ThreadManager in process (no
HTTP, no polling), which bounds what the API can reach.

    python scripts/bench_chat.py [--threads 60] [--workers 2] [--levels 1,10,50] [--poll 0.4]

``--agent``: the same threads answered by a real agent instead — a tiny world model warm-started on a
synthetic world (built once into .cache/awarl-bench/, or the checkpoint given with --agent-dir), over
that world's corpus and policy, with the default product's settings (verify-and-resample, loop-built
questions, 32 workers). ``--agent-threads`` threads are submitted at once, twice in the same run:
generations one at a time (batch_size 1), then batched (batch_size 32); a thread's time runs from
its submission until it leaves PROCESSING (served, or a clarifying question shown), polled every
``--poll`` seconds as the web UI does.

    python scripts/bench_chat.py --agent [--agent-threads 50] [--agent-dir CHECKPOINT] [--demo DEMO_FOLDER] [--device cuda]

``--demo``: the agent, world, corpus and policy of an ``awarl demo`` folder, as ``awarl chat serve``
serves them after the demo (its search noise off); ``--agent-dir`` then serves another checkpoint
over the same world.
"""

from __future__ import annotations

import argparse
import json
import asyncio
import multiprocessing
import os
import re
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from awarl.chat.app import create_app  # noqa: E402
from awarl.chat.config import ChatSettings  # noqa: E402
from awarl.chat.generate import AgentGenerator, ScriptedGenerator, rollout_of  # noqa: E402
from awarl.chat.manager import ThreadManager  # noqa: E402

PRICING = ROOT / "configs" / "policies" / "pricing.yaml"


def generator() -> ScriptedGenerator:
    def answer(q, n):
        k = int(re.search(r"#(\d+)", q).group(1))
        return f"<answer>Order #{k}: as a gold member you get {10 if k % 2 else 15}% off.</answer>"

    def rewrite(p, n):
        k = re.search(r"#(\d+)", p).group(1)
        return f"DECISION: REWRITE\nANSWER: Order #{k}: as a gold member you get 15% off."

    return ScriptedGenerator(answer, rewrite)


def prompt(k: int) -> str:
    return f"I am a gold member buying regular-priced item #{k} for $80. What discount do I get?"


def settings(folder: Path, workers: int) -> ChatSettings:
    return ChatSettings(policy=str(PRICING), generator="scripted", db=str(folder / "chat.sqlite"),
                        audit=str(folder / "audit.jsonl"), workers=workers)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def serve(folder: str, workers: int, port: int) -> None:
    """The server process: the real app with the scripted generator, on loopback."""
    app = create_app(settings(Path(folder), workers), generators={"scripted": generator()})
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


class Conn:
    """One keep-alive HTTP/1.1 connection doing the least client-side work per request. httpx's async
    client, tried first, spent more time queueing requests than the server spent answering them at 50
    connections on this machine, which measured the client, not the server."""

    def __init__(self, port: int):
        self.port = port

    async def open(self) -> "Conn":
        self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n")
        self.w.write(head.encode() + data)
        status = int((await self.r.readline()).split()[1])
        length = 0
        while (line := await self.r.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return status, json.loads(await self.r.readexactly(length))

    def close(self) -> None:
        self.w.close()


def run_api(port: int, n: int, concurrency: int, offset: int, poll: float) -> dict:
    """``concurrency`` clients, each on its own connection, on one asyncio loop."""
    gets, posts, e2e, threads = [], [], [], []

    async def client(ids: list[int]) -> None:
        c = await Conn(port).open()
        try:
            for k in ids:
                t0 = time.perf_counter()
                status, body = await c.request("POST", "/api/chat", {"prompt": prompt(k)})
                posts.append(time.perf_counter() - t0)
                if status != 200:
                    raise RuntimeError(f"POST /api/chat: {status} {body}")
                while True:
                    g0 = time.perf_counter()
                    t = (await c.request("GET", f"/api/thread/{body['thread_id']}"))[1]["thread"]
                    gets.append(time.perf_counter() - g0)
                    if t["status"] != "PROCESSING":
                        break
                    await asyncio.sleep(poll)
                e2e.append(time.perf_counter() - t0)
                threads.append(t)
        finally:
            c.close()

    async def main() -> None:
        ids = list(range(offset, offset + n))
        await asyncio.gather(*(client(ids[i::concurrency]) for i in range(concurrency)))

    started = time.perf_counter()
    asyncio.run(main())
    return summarize(threads, time.perf_counter() - started, n, gets=gets, posts=posts, e2e=e2e)


def run_inprocess(manager: ThreadManager, n: int, concurrency: int, offset: int) -> dict:
    e2e, threads = [], []
    lock = threading.Lock()

    def client(ids: list[int]) -> None:
        for k in ids:
            t0 = time.perf_counter()
            t = manager.wait(manager.submit(prompt(k)).id, timeout=120, interval=0.005)
            with lock:
                e2e.append(time.perf_counter() - t0)
                threads.append(t)

    ids = list(range(offset, offset + n))
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(client, [ids[i::concurrency] for i in range(concurrency)]))
    return summarize(threads, time.perf_counter() - started, n, e2e=e2e)


def summarize(threads: list[dict], wall: float, n: int, gets=(), posts=(), e2e=()) -> dict:
    ok = [t for t in threads if t["status"] == "COMPLETED" and t["badge"] in ("VALID", "VALID_GIVEN_YOUR_STATEMENT")]
    mixed = [t for t in ok if re.search(r"#(\d+)", t["prompt"]).group(1) != re.search(r"#(\d+)", t["final_response"]).group(1)]
    solver = sum(i["solver_s"] for t in threads for i in t["iterations"])
    validate = sum(i["validate_s"] for t in threads for i in t["iterations"])
    return {"completed": len(ok), "lost": n - len(threads), "mixed": len(mixed), "wall": wall, "threads_s": len(ok) / wall,
            "get_p50": pct(list(gets), 0.5), "get_p95": pct(list(gets), 0.95), "post_p95": pct(list(posts), 0.95),
            "e2e_p50": pct(list(e2e), 0.5), "e2e_p95": pct(list(e2e), 0.95), "gets": len(gets),
            "solver_share": solver / sum(e2e) if e2e else float("nan"), "validate_s": validate / max(1, len(threads))}


AGENT_WORLD = {"persons": 120, "seed": 0}
"""The world the benchmark's agent is warm-started on and answers about (the tests' world agent)."""


def world_agent(world, folder: Path) -> tuple[Path, str]:
    """A tiny world model warm-started on ``world``'s gold trajectories (`awarl.train.tiny`), built once."""
    from awarl.data.world import world_texts
    from awarl.train.tiny import build_tiny_model, sample_texts, warm_start_on_world

    if not (folder / "config.json").exists():
        started = time.perf_counter()
        base = folder.with_name(folder.name + "-base")
        build_tiny_model(base, sample_texts(ROOT / "data" / "samples") + world_texts(world),
                         whole_tokens=[f"[{p.id}]" for p in world.passages])
        warm_start_on_world(base, folder, world)
        print(f"built the agent in {time.perf_counter() - started:.0f}s -> {folder}")
    return folder, "tiny world model warm-started on the world's gold trajectories (200 SFT steps)"


def run_agent_path(label: str, batch: int, folder: Path, world_files: dict, backend, retriever, rollout,
                   questions: list[str], workers: int, poll: float) -> dict:
    """``questions`` submitted at once to a manager whose agent batches ``batch`` generations at most."""
    gen = AgentGenerator(backend, retriever, rollout, name="agent", max_batch=batch, window_s=0.02)
    s = ChatSettings(policy=str(world_files["policy"]), policy_name="world", corpus=str(world_files["corpus"]),
                     generator="agent", db=str(folder / "chat.sqlite"), audit=str(folder / "audit.jsonl"),
                     workers=workers, batch_size=batch, resample_feedback=False, temperature=1.0, max_iterations=3)
    m = ThreadManager(s, generators={"agent": gen}).start()
    try:
        # Before timing: the workers load their policy copies (validate-only threads, no generation) and the
        # agent runs once (its runners are built on first use).
        warm = [m.submit(q, answer="Not enough information.").id for q in questions[:workers]]
        warm.append(m.submit(questions[-1]).id)
        for tid in warm:
            m.wait(tid, timeout=900, interval=0.05)
        gen.batch_sizes.clear()
        e2e: list[float] = []
        threads: list[dict] = []
        lock = threading.Lock()

        def client(q: str) -> None:
            t0 = time.perf_counter()
            t = m.wait(m.submit(q).id, timeout=900, interval=poll)
            with lock:
                e2e.append(time.perf_counter() - t0)
                threads.append(t)

        started, cpu0 = time.perf_counter(), cpu_seconds()
        with ThreadPoolExecutor(len(questions)) as pool:
            list(pool.map(client, questions))
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu0
    finally:
        m.close()
    sizes = gen.batch_sizes
    gens = sum(1 for t in threads for i in t["iterations"] if i["type"] in ("initial", "resample"))
    count = lambda key, value: sum(1 for t in threads if t[key] == value)  # noqa: E731
    return {"label": label, "batch": batch, "wall": wall, "cpu": cpu, "e2e_p50": pct(e2e, 0.5), "e2e_p95": pct(e2e, 0.95),
            "served": count("status", "COMPLETED"), "asked": count("status", "AWAITING_INPUT"),
            "errors": count("status", "ERROR"), "valid": count("badge", "VALID"),
            "cited_only": count("valid_from", "citations"),
            "validate_s": sum(i["validate_s"] for t in threads for i in t["iterations"]) / max(1, len(threads)), "gens": gens / max(1, len(threads)),
            "mean_batch": sum(k * v for k, v in sizes.items()) / max(1, sum(sizes.values())), "max_batch": max(sizes, default=0)}


def agent_main(args) -> None:
    from awarl.data.world import WorldConfig, generate_world, write_world
    from awarl.llm.spec import load_backend
    from awarl.search.bm25 import BM25Index

    demo_files = None
    if args.demo:  # the demo's own agent, world, corpus and policy, as `awarl chat serve` after `awarl demo` serves them
        from awarl.chat.heldout import load_demo

        demo = load_demo(args.demo, db_dir=tempfile.mkdtemp(), agent=args.agent_dir)
        world, agent = demo.world, Path(demo.settings.generator.split(":", 1)[1])
        how, demo_files = f"the demo's agent ({args.demo})", {"policy": demo.settings.policy, "corpus": demo.settings.corpus}
    else:
        world = generate_world(WorldConfig(**AGENT_WORLD))
        folder = Path(args.agent_dir) if args.agent_dir else ROOT / ".cache" / "awarl-bench" / "world-agent-p120-s0"
        agent, how = (folder, "the checkpoint given") if args.agent_dir else world_agent(world, folder)
    load = os.getloadavg()[0]
    backend = load_backend(f"hf:{agent}", device=args.device)  # as the server loads it (micro-batches of 32)
    retriever = BM25Index.build(list(world.passages))
    rollout = rollout_of(agent)
    qs = [q.question for q in world.split("eval")] + [q.question for q in world.questions]
    questions = list(dict.fromkeys(qs))[: args.agent_threads]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = demo_files or write_world(world, Path(tmp) / "world")
        for label, batch in (("one at a time", 1), ("batched", args.agent_batch)):
            rows.append(run_agent_path(label, batch, Path(tmp) / label.replace(" ", "-"), files, backend, retriever,
                                       rollout, questions, args.agent_workers, args.poll))
    params = sum(p.numel() for p in backend.model.parameters())
    print(f"agent: {how}, {params / 1e6:.2f} M parameters ({agent}); world v{world.config.version}, {len(world.persons)} persons, "
          f"{len(world.passages)} passages; generation on {args.device} ({next(backend.model.parameters()).dtype}); "
          f"{len(questions)} threads submitted at once; {args.agent_workers} workers; "
          f"torch threads {torch_threads()}; clients poll every {args.poll}s; load average before: {load:.1f}")
    header = ("generation", "batch size", "mean batch", "largest batch", "served", "asked", "errors", "VALID",
              "VALID from citations alone", "generations/thread", "validate s/thread", "thread p50 s", "thread p95 s", "wall s", "CPU s")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print(f"| {r['label']} | {r['batch']} | {r['mean_batch']:.1f} | {r['max_batch']} | {r['served']} | {r['asked']} | "
              f"{r['errors']} | {r['valid']} | {r['cited_only']} | {r['gens']:.2f} | {r['validate_s']:.2f} | {r['e2e_p50']:.1f} | {r['e2e_p95']:.1f} | {r['wall']:.1f} | {r['cpu']:.1f} |")
    one, batched = rows
    print(f"\none at a time / batched: p50 {one['e2e_p50'] / batched['e2e_p50']:.1f}x, p95 "
          f"{one['e2e_p95'] / batched['e2e_p95']:.1f}x, wall {one['wall'] / batched['wall']:.1f}x, CPU "
          f"{one['cpu'] / batched['cpu']:.1f}x; "
          f"target p95 <= 15 s: {'met' if batched['e2e_p95'] <= 15 else 'MISSED'} ({batched['e2e_p95']:.1f} s batched)")


def cpu_seconds() -> float:
    """CPU time of this process so far (user + system, every thread): what a quiet machine would need."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=60, help="Threads per concurrency level.")
    ap.add_argument("--workers", type=int, default=2, help="Server worker threads (default: one per core here).")
    ap.add_argument("--levels", default="1,10,50", help="Concurrent clients, comma-separated.")
    ap.add_argument("--poll", type=float, default=0.4, help="Seconds between a client's GETs of its thread (the web UI polls every 0.4 s).")
    ap.add_argument("--agent", action="store_true", help="Benchmark a real agent: one-at-a-time vs batched generation.")
    ap.add_argument("--agent-threads", type=int, default=50, help="Threads submitted at once (--agent).")
    ap.add_argument("--agent-workers", type=int, default=32, help="Chat workers (--agent; the default product's 32).")
    ap.add_argument("--agent-batch", type=int, default=32, help="batch_size of the batched path (--agent).")
    ap.add_argument("--device", default="cpu", help="Where the agent generates (--agent): cpu, cuda (bf16), cuda:N.")
    ap.add_argument("--demo", default=None, help="An `awarl demo` folder: its agent, world, corpus and policy (--agent).")
    ap.add_argument("--agent-dir", default=None, help="A warm-started world-agent checkpoint for the 120-person "
                    "seed-0 world (--agent; default: build one into .cache/awarl-bench/).")
    args = ap.parse_args()
    if args.agent:
        agent_main(args)
        return
    levels = [int(x) for x in args.levels.split(",")]
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = Path(tmp) / "baseline"
        m = ThreadManager(settings(base_dir, args.workers), generators={"scripted": generator()}).start()
        try:
            run_inprocess(m, 4, 1, 10_000)  # warm-up: policy loading, first Z3 contexts
            for level in levels:
                rows.append(("in-process (baseline)", level, run_inprocess(m, args.threads, level, 20_000 + 1000 * level)))
        finally:
            m.close()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = multiprocessing.get_context("spawn").Process(target=serve, args=(str(Path(tmp) / "api"), args.workers, port))
        server.start()
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or not server.is_alive():
                        raise SystemExit("the chat server did not start")
                    time.sleep(0.1)
            run_api(port, 4, 1, 30_000, args.poll)  # warm-up
            for level in levels:
                rows.append(("REST API, uvicorn loopback", level, run_api(port, args.threads, level, 40_000 + 1000 * level, args.poll)))
        finally:
            server.terminate()
            server.join(timeout=10)

    ms = lambda x: "-" if x != x else f"{1000 * x:.1f}"  # noqa: E731 (nan -> "-")
    print(f"threads per level: {args.threads}; server workers: {args.workers}; clients poll every {args.poll}s; "
          f"policy: pricing (10 rules); half the threads need one rewrite; load average before: {load:.1f}")
    header = ("path", "concurrent", "completed", "lost", "mixed", "threads/s", "GET p50 ms", "GET p95 ms", "POST p95 ms",
              "thread p50 ms", "thread p95 ms", "validate ms/thread", "solver share")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, level, r in rows:
        print(f"| {name} | {level} | {r['completed']}/{args.threads} | {r['lost']} | {r['mixed']} | {r['threads_s']:.1f} | "
              f"{ms(r['get_p50'])} | {ms(r['get_p95'])} | {ms(r['post_p95'])} | {ms(r['e2e_p50'])} | {ms(r['e2e_p95'])} | "
              f"{ms(r['validate_s'])} | {100 * r['solver_share']:.0f}% |")
    api = [r for name, _, r in rows if name.startswith("REST")]
    worst = max(r["get_p95"] for r in api)
    print(f"\nTarget p95 GET /api/thread/{{id}} < 100 ms: {'met' if worst < 0.1 else 'MISSED'} (worst {ms(worst)} ms); "
          f"every thread completed: {all(r['completed'] == args.threads for _, _, r in rows)}")


if __name__ == "__main__":
    main()
