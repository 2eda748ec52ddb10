"""GPU timings of a callable two ways: eager (each call's host work included, what a Python caller
sees) and replayed from a CUDA graph (the same kernels with no host work between them, what a
serving stack that runs decode under CUDA graphs sees); and a sustained run with NVML's SM clock
and board power beside it (:func:`sustained`)."""


def eager_ms(torch, fn, reps, warmup=3):
    """Median milliseconds of one ``fn()`` between two CUDA events, the stream idle before each
    call: host launch overhead is inside the interval whenever it exceeds the GPU work."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return median(times)


def burst_ms(torch, fn, calls=10, blocks=5, warmup=3, before=None):
    """Median milliseconds per call over ``blocks`` blocks of ``calls`` back-to-back ``fn()``
    between two CUDA events (``before()`` runs ahead of each block, e.g. a barrier of the ranks);
    the stream is idle before each block."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(blocks):
        if before is not None:
            before()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return median(times)


def capture(torch, fn, warmup=2):
    """``(graph, out)``: ``fn`` captured once into a CUDA graph; ``out`` is what the captured call
    returned, the buffer every replay rewrites.  Warm-up calls run first on the capture stream, so
    lazy work (Triton compiles, per-stream scratch, cached descriptors) happens outside the graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = fn()
    torch.cuda.synchronize()
    return graph, out


def graph_ms(torch, graph, reps, inner=10):
    """Median over ``reps`` batches of milliseconds per replay, each batch ``inner`` replays queued
    back to back between two events: the GPU never waits for the host inside a batch (a replay
    is one launch; the kernels of a layer take longer than the host needs to queue the next)."""
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / inner)
    return median(times)


def median(times):
    """The middle of ``times`` (of an even count, the upper of the two middle values)."""
    return sorted(times)[len(times) // 2]


def round_robin(timers, rounds):
    """``{name: [ms, ...]}``: each timer of ``timers`` (name -> a call returning milliseconds)
    called ``rounds`` times, round robin (a, b, a, b, ...), so that a drift of the GPU's clock or
    temperature falls on every side alike."""
    out = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            out[name].append(timer())
    return out


def sustained(torch, fn, seconds):
    """``fn`` run back to back for ``seconds`` while NVML samples the SM clock and the board power
    every 50 ms: ``{ms, sm_mhz, watts, min_mhz}`` over the second half (after the clock settled) —
    does a side run at a lower clock than another under the power cap?"""
    import threading
    import time

    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    samples, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            samples.append((time.time(), pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0))
            time.sleep(0.05)
    fn()
    torch.cuda.synchronize()
    th = threading.Thread(target=poll)
    th.start()
    t0 = time.time()
    calls, marks = 0, []
    while time.time() - t0 < seconds:
        for _ in range(10):
            fn()
        calls += 10
        torch.cuda.synchronize()
        marks.append((time.time(), calls))
    stop.set()
    th.join()
    half = t0 + (marks[-1][0] - t0) / 2
    t_mid, c_mid = next(m for m in marks if m[0] >= half)
    late = [x for x in samples if x[0] >= half] or samples
    return {"ms": (marks[-1][0] - t_mid) / max(marks[-1][1] - c_mid, 1) * 1e3,
            "sm_mhz": sum(x[1] for x in late) / len(late), "watts": sum(x[2] for x in late) / len(late),
            "min_mhz": min(x[1] for x in late)}
