"""perfloop's profiler hook: the program inserted above a target's decode class, as text.

tools/workspace/instrumentation.py reads the `_perfloop_profiled` function below as text (from its
`def` line to its last line) and inserts it, each line marked `# perfloop-instrumentation`, into
the target's file; the decode method gets `@_perfloop_profiled`. It runs inside the target's
process, so it uses only the standard library and torch, imported when armed.

Keep the text stable: an instrumented checkout is recognised by exactly these lines (a resumed
session checks them), so the file is left out of `ruff format`, and the lint rules that would
rewrite it are switched off for it (pyproject.toml). Behaviour is described in instrumentation.py
and tested in tests/unit/test_profiler_hook.py.
"""


def _perfloop_profiled(fn):
    # Profile fn with torch.profiler when $PERFLOOP_PROFILE_DIR/request.json appears (rank 0; it
    # passes the request on to each other rank as request.rank<R>.json, profiled into <id>/rank<R>).
    import os
    root = os.environ.get("PERFLOOP_PROFILE_DIR")
    if not root:
        return fn
    import json
    import torch
    import torch.distributed
    import torch.profiler
    run = {}

    def write(path, text):
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)

    def ranks():
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def finish(prof):
        out = run["out"]
        trace, summary = os.path.join(out, "trace.json.gz"), os.path.join(out, "summary.txt")
        prof.export_chrome_trace(os.path.join(out, "tmp.trace.json.gz"))
        os.replace(os.path.join(out, "tmp.trace.json.gz"), trace)
        averages = prof.key_averages(group_by_input_shape=True)
        first = averages[0] if len(averages) else None
        key = "self_cpu_time_total"
        if run["device"] == "cuda":
            key = "self_device_time_total" if hasattr(first, "self_device_time_total") else "self_cuda_time_total"
        write(summary, averages.table(sort_by=key, row_limit=40))
        done = {"id": run["id"], "steps": run["active"], "device": run["device"], "trace": trace, "summary": summary}
        write(os.path.join(out, "done.json"), json.dumps(done))

    def begin():
        me, world = ranks()
        request = os.path.join(root, "request.json" if me == 0 else "request.rank%d.json" % me)
        if not os.path.exists(request):
            return
        claiming = "%s.%d.claiming" % (request, os.getpid())
        os.rename(request, claiming)
        with open(claiming) as f:
            spec = json.load(f)
        run_id, warmup, active = str(spec["id"]), int(spec["warmup_steps"]), int(spec["active_steps"])
        if not run_id.replace("-", "").replace("_", "").replace(".", "").isalnum() or active < 1:
            raise ValueError("bad request %r: id must be [A-Za-z0-9._-], active_steps >= 1" % (spec,))
        os.rename(claiming, os.path.join(root, "request.%s.claimed" % (run_id if me == 0 else "%s.rank%d" % (run_id, me))))
        out = os.path.join(root, run_id) if me == 0 else os.path.join(root, run_id, "rank%d" % me)
        run.update(id=run_id, out=out, total=warmup + active, active=active, steps=0)
        os.makedirs(run["out"], exist_ok=True)
        for other in range(1, world if me == 0 else 1):
            write(os.path.join(root, "request.rank%d.json" % other), json.dumps(spec))
        activities = [torch.profiler.ProfilerActivity.CPU]
        # CUDA only where this process uses it: a CPU server on a GPU machine never initializes it.
        run["device"] = "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"
        if run["device"] == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        schedule = torch.profiler.schedule(wait=0, warmup=warmup, active=active, repeat=1)
        prof = torch.profiler.profile(activities=activities, record_shapes=True, with_flops=True,
                                      schedule=schedule, on_trace_ready=finish)
        prof.start()
        run["prof"] = prof

    def after():
        run["prof"].step()
        run["steps"] += 1
        if run["steps"] >= run["total"]:
            run["prof"].stop()
            run.clear()

    def fail(exc):
        prof, out = run.pop("prof", None), run.get("out", root)
        run.clear()
        write(os.path.join(out, "error.txt"), "%s: %s\n" % (type(exc).__name__, exc))
        if prof is not None:
            prof.stop()

    def guarded(step):
        try:
            step()
        except Exception as exc:
            try:
                fail(exc)
            except Exception:
                pass

    def wrapper(*args, **kwargs):
        if "prof" not in run:
            guarded(begin)
        result = fn(*args, **kwargs)
        if "prof" in run:
            guarded(after)
        return result

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, name, getattr(fn, name))
    wrapper.__wrapped__ = fn
    return wrapper
