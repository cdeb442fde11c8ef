"""The numerics gate benchmark's variants (benchmarks/numerics_gate.py): benign math changes and planted
bugs on the demo's model (examples/targets/mla_server), each a set of monkeypatches on one in-process
`ModelRunner`, undone after the variant ran.

A bug's `effect`: its stated size where it has one (a scale error of 10%, a softmax temperature off
by 5%: `nominal`), else the relative RMS error it puts into the tensor it corrupts, where it acts:
||bug - right|| / ||right|| over the rows (tokens) it changes, measured in the run on the same
inputs (the right tensor computed beside the wrong one; named per bug in `at`). The measured figure
is kept for every bug (for a scale error it is the scale error, within bf16 and FP8 rounding: a
5% dequantization-scale error measures 4.95%). kv_proj's scale error is measured on the KV rows as
stored: the model renormalises the 512 latent dims right after the projection, so only the 64 rope
dims keep it (a 5% scale reaches the cache at ~1.7%). Benign changes have no effect size. Standard library + torch only (the GPU machine's Python)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

MISSING = object()


@dataclass
class Meter:
    """Sums of squares of a bug's error and of the right tensor, over the rows the bug changed."""

    err: float = 0.0
    ref: float = 0.0

    def add(self, right: torch.Tensor, wrong: torch.Tensor) -> None:
        d = (wrong.float() - right.float()).reshape(right.shape[0], -1)
        r = right.float().reshape(right.shape[0], -1)
        rows = d.abs().amax(-1) > 0
        self.err += float(d[rows].pow(2).sum())
        self.ref += float(r[rows].pow(2).sum())

    @property
    def effect(self) -> float | None:
        """Percent; None where the bug never acted."""
        return 100 * math.sqrt(self.err / self.ref) if self.ref > 0 else None


@dataclass
class Variant:
    """One change: `apply(ctx, stack)` patches the runner (undone by the stack)."""

    name: str
    cls: str  # benign | bug
    apply: Callable
    at: str = ""  # bugs: the tensor whose error is the effect
    nominal: float | None = None  # bugs with a stated size (a scale error of 5%): that size, percent
    compiles: bool = False
    static: bool | None = None  # run on the other decode path (None: the runner's own)
    meter: Meter = field(default_factory=Meter)


def setp(stack: contextlib.ExitStack, obj, name: str, value) -> None:
    """Set obj.name for the variant; the stack puts the old value (or its absence) back."""
    old = obj.__dict__.get(name, MISSING) if hasattr(obj, "__dict__") else getattr(obj, name)
    stack.callback(lambda: delattr(obj, name) if old is MISSING else setattr(obj, name, old))
    setattr(obj, name, value)


def precise(ctx, stack: contextlib.ExitStack) -> None:
    """The precision reference: the same model (its bfloat16 weights, upcast exactly) computed in
    float32, rope tables included; the KV cache stays FP8 (the engine's format). How far the engine's
    own rounding puts the baseline from its math: the numerics gate's yardstick on a host where no
    schedule moves the tokens."""
    m = ctx.model
    for name in ("embed", "final_norm", "lm_head"):
        setp(stack, m, name, getattr(m, name).float())
    for w in m.layers:
        for k, v in list(vars(w).items()):
            if torch.is_tensor(v) and v.is_floating_point():
                setp(stack, w, k, v.float())
    setp(stack, m, "dtype", torch.float32)  # what the server's `--dtype float32` builds
    cos, sin = m._rope_table(m.cos.shape[0])
    setp(stack, m, "cos", cos)
    setp(stack, m, "sin", sin)


# --- attention: the demo's `_attend` (per request; prefill causal) and `_attend_masked` (static step)


def _softmax(scores: torch.Tensor, o: dict) -> torch.Tensor:
    if o.get("manual_softmax"):
        e = (scores - scores.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)
    return scores.softmax(dim=-1)


def _core(q, keys, mask, scaling, o: dict, meter: Meter | None) -> torch.Tensor:
    """Attention of q `[B, h, 576]` over keys `[B or 1, S, 576]` where mask `[B, 1, S]` (True: attend),
    as the demo computes it, with the variant's options `o`; returns `[B, h, 512]`."""
    if "kv_scale" in o:  # a dequantization-scale error: the FP8 rows read back scaled
        wrong = keys * (1 + o["kv_scale"])
        if meter is not None:
            meter.add(keys.expand(q.shape[0], -1, -1), wrong.expand(q.shape[0], -1, -1))
        keys = wrong
    if o.get("window"):  # only the last W positions before (and at) each query
        pos = mask.long().cumsum(-1)
        last = pos[..., -1:]
        mask = mask & (pos > last - o["window"])
    if o.get("reverse"):
        keys, mask = keys.flip(-2), mask.flip(-1)
    values = keys[..., :512]
    dt = torch.float32 if o.get("f32") else q.dtype
    qq, kk = q.to(dt), keys.to(dt)
    scale = scaling * o.get("score_scale", 1.0)
    if o.get("scale_q"):
        qq = qq * scale
    if o.get("einsum"):
        raw = torch.einsum("bhd,bsd->bhs", qq, kk.expand(q.shape[0], -1, -1))
    else:
        raw = torch.matmul(qq, kk.transpose(-1, -2))
    scores = raw.float() if o.get("scale_q") else raw.float() * scale
    if "temperature" in o and meter is not None:
        meter.add(scores.masked_fill(~mask, 0), (scores * o["temperature"]).masked_fill(~mask, 0))
    scores = scores * o.get("temperature", 1.0)
    scores = scores.masked_fill(~mask, float("-inf"))
    pv_dt = torch.float32 if (o.get("f32") or o.get("probs_f32")) else q.dtype
    vv = values.to(pv_dt)
    chunks = o.get("split_kv", 1)
    if chunks > 1:  # flash-decoding: per chunk max, sum and partial output, merged by log-sum-exp
        outs, maxes, sums = [], [], []
        for s, v in zip(scores.chunk(chunks, -1), vv.chunk(chunks, -2), strict=True):
            m = s.amax(-1, keepdim=True).clamp_min(-1e30)
            e = (s - m).exp()
            outs.append(torch.matmul(e.to(pv_dt), v).float())
            maxes.append(m)
            sums.append(e.sum(-1, keepdim=True))
        top = torch.stack(maxes).amax(0)
        num = sum(out * (m - top).exp() for out, m in zip(outs, maxes, strict=True))
        den = sum(z * (m - top).exp() for z, m in zip(sums, maxes, strict=True))
        return (num / den).to(q.dtype)
    probs = _softmax(scores, o).to(pv_dt)
    return torch.matmul(probs, vv).to(q.dtype)


def attention(ctx, stack, o: dict, meter: Meter | None, at_output: bool = False) -> None:
    """Replace both attention entry points of the backend with `_core` under options `o`."""
    backend = ctx.backend

    def run(q, keys, mask):
        out = _core(q, keys, mask, backend.scaling, o, None if at_output else meter)
        if at_output and meter is not None:
            meter.add(_core(q, keys, mask, backend.scaling, {}, None), out)
        return out

    def attend(q, kv, causal):
        keys = kv.squeeze(1).unsqueeze(0)  # [1, s, 576]
        t, s = q.shape[0], keys.shape[1]
        mask = torch.ones(t, s, dtype=torch.bool, device=q.device)
        if causal:
            mask = ~mask.triu(s - t + 1)
        return run(q, keys, mask.unsqueeze(1))

    def attend_masked(q, keys, mask):
        return run(q, keys, mask.unsqueeze(1))

    setp(stack, backend, "_attend", attend)
    setp(stack, backend, "_attend_masked", attend_masked)


# --- linear layers: the model's `F.linear`, by the role of the weight


class _Linear:
    def __init__(self, f, roles: dict, o: dict, meter: Meter | None):
        self.f, self.roles, self.o, self.meter = f, roles, o, meter

    def __getattr__(self, name):
        return getattr(self.f, name)

    def linear(self, x, weight, bias=None):
        o, role = self.o, self.roles.get(id(weight), "")
        if o.get("f32") and (o.get("roles") is None or role in o["roles"]):
            out = torch.nn.functional.linear(x.float(), weight.float()).to(x.dtype)
        elif o.get("split_k"):  # K split in n parts, float32 partial sums (optionally summed in reverse)
            parts = [
                torch.nn.functional.linear(a, b).float()
                for a, b in zip(x.chunk(o["split_k"], -1), weight.chunk(o["split_k"], -1), strict=True)
            ]
            out = sum(reversed(parts) if o.get("reverse") else parts).to(x.dtype)
        else:
            out = self.f.linear(x, weight, bias)
        scale = o.get("scale", {}).get(role)
        if scale is not None:
            wrong = out * (1 + scale)
            if self.meter is not None and role == "kv_proj":  # measured on the KV rows as stored
                self.meter.add(_key_rows(out), _key_rows(wrong))
            elif self.meter is not None:
                self.meter.add(out, wrong)
            out = wrong
        return out


def _key_rows(kv: torch.Tensor) -> torch.Tensor:
    """kv_proj's output as the KV cache stores it, but for the rope's rotation (which keeps norms):
    its 512 latent dims through the model's RMSNorm (weight 1, eps 1e-6), the 64 rope dims as they are;
    a scale of the whole output is undone on the latent, so a bug there reaches the cache at ~1/3 size."""
    lat = kv[..., :512].float()
    lat = lat * torch.rsqrt(lat.pow(2).mean(-1, keepdim=True) + 1e-6)
    return torch.cat([lat, kv[..., 512:].float()], dim=-1)


def linear(ctx, stack, o: dict, meter: Meter | None) -> None:
    roles = {id(ctx.model.lm_head): "lm_head"}
    for w in ctx.model.layers:
        for role in ("q_proj", "kv_proj", "o_proj", "router", "gate_up", "down"):
            roles[id(getattr(w, role))] = role
    setp(stack, ctx.mod, "F", _Linear(ctx.mod.F, roles, o, meter))


# --- RMSNorm, rope and the MoE


def norm(ctx, stack, how: str, eps: float | None = None, meter: Meter | None = None) -> None:
    right = ctx.mod.rms_norm

    def rms(x, weight, eps_=1e-6):
        xf = x.float()
        if how == "div":
            return (xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps_)).to(x.dtype) * weight
        if how == "sum":
            return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) / xf.shape[-1] + eps_)).to(
                x.dtype
            ) * weight
        if how == "torch":
            return torch.nn.functional.rms_norm(xf, (xf.shape[-1],), eps=eps_).to(x.dtype) * weight
        if how == "f32weight":
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps_) * weight.float()).to(x.dtype)
        out, wrong = right(x, weight, eps_), right(x, weight, eps)  # how == "eps": a changed epsilon
        if meter is not None:
            meter.add(out, wrong)
        return wrong

    setp(stack, ctx.mod, "rms_norm", rms)


def rope(ctx, stack, f32: bool = False, past: int | None = None, meter: Meter | None = None) -> None:
    model = ctx.model
    right = model._rope

    def fn(x, positions):
        if f32:
            half = x.shape[-1] // 2
            inv = 1.0 / 10000.0 ** (torch.arange(0, x.shape[-1], 2, device=x.device) / x.shape[-1])
            ang = positions.float().unsqueeze(-1) * inv
            ang = torch.cat([ang, ang], -1).view(
                (positions.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
            )
            xf = x.float()
            rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
            return (xf * ang.cos() + rotated * ang.sin()).to(x.dtype)
        out = right(x, positions)
        wrong = right(x, torch.where(positions >= past, positions + 1, positions))
        if meter is not None:
            meter.add(out, wrong)
        return wrong

    setp(stack, model, "_rope", fn)


def moe(ctx, stack, how: str, meter: Meter | None = None) -> None:
    model = ctx.model
    right = model._moe
    F = torch.nn.functional

    def fn(x, w):
        c, n = model.cfg, x.shape[0]
        if how in ("drop", "no_renorm", "top1"):
            scores = F.linear(x, w.router).float().softmax(dim=-1)
            top, idx = scores.topk(c.top_k - (how == "top1"), dim=-1)
            gates_w = top if how == "no_renorm" else top / top.sum(-1, keepdim=True)
            gates = torch.zeros_like(scores).scatter_(-1, idx, gates_w)
            if how == "drop":  # expert 0 never runs: its share of the mixture is lost
                gates[:, 0] = 0
            gate, up = F.linear(x, w.gate_up).view(n, c.experts, 2 * c.ffn).chunk(2, dim=-1)
            act = F.silu(gate) * up * gates.to(x.dtype).unsqueeze(-1)
            wrong = F.linear(act.reshape(n, -1), w.down)
            if meter is not None:
                meter.add(right(x, w), wrong)
            return wrong
        logits = F.linear(x, w.router).float()
        if how == "topk_softmax":  # softmax over the top-k logits: the renormalised gates, in math
            top_l, idx = logits.topk(c.top_k, dim=-1)
            top = top_l.softmax(-1)
        else:
            top, idx = logits.softmax(-1).topk(c.top_k, dim=-1)
            top = top / top.sum(-1, keepdim=True)
        if how == "sparse":  # only the routed experts, one matmul each (a grouped GEMM's math)
            gu = w.gate_up.view(c.experts, 2 * c.ffn, -1)
            down = w.down.view(w.down.shape[0], c.experts, c.ffn)
            out = torch.zeros(n, w.down.shape[0], dtype=torch.float32, device=x.device)
            for e in range(c.experts):
                rows = (idx == e).any(-1).nonzero().squeeze(-1)
                if rows.numel() == 0:
                    continue
                g = (top * (idx == e)).sum(-1)[rows].to(x.dtype).unsqueeze(-1)
                gate, up = F.linear(x[rows], gu[e]).chunk(2, dim=-1)
                out[rows] += F.linear(F.silu(gate) * up * g, down[:, e]).float()
            return out.to(x.dtype)
        gates = torch.zeros_like(logits).scatter_(-1, idx, top)
        gate, up = F.linear(x, w.gate_up).view(n, c.experts, 2 * c.ffn).chunk(2, dim=-1)
        if how == "silu_f32":
            act = (F.silu(gate.float()) * up.float()).to(x.dtype) * gates.to(x.dtype).unsqueeze(-1)
        else:
            act = F.silu(gate) * up * gates.to(x.dtype).unsqueeze(-1)
        return F.linear(act.reshape(n, -1), w.down)

    setp(stack, model, "_moe", fn)


# --- torch.compile of the layer math (mla_server/compile.py) and the cast fix


def compiled(ctx, stack, settings: str) -> None:
    """`--enable-torch-compile` as the demo does it: `exact` (its inductor settings), `defaults`
    (inductor's own), `fusion` (the decode-step-fusion playbook's: dynamic shapes,
    emulate_precision_casts only). Compiled lazily for the batch sizes the run meets."""
    import torch._inductor.config as inductor
    from mla_server.compile import CompiledDecode, _layer

    saved = inductor.save_config()
    stack.callback(torch._dynamo.reset)
    stack.callback(inductor.load_config, saved)
    setp(stack, ctx.backend, "_attend_masked", ctx.backend._attend_masked)  # CompiledDecode replaces it
    comp = CompiledDecode(ctx.runner, 10**6)
    if settings != "exact":
        inductor.load_config(saved)
    if settings == "fusion":
        inductor.emulate_precision_casts = True
        comp.layer = torch.compile(_layer, dynamic=True)
    setp(stack, ctx.runner, "compiled", comp)


def cast_fix(ctx, stack) -> None:
    """The kv-cache-full-pool-cast playbook's change: gather the rows, then cast (not the whole pool)."""
    pool = ctx.backend.kv_pool
    right = pool.get_key_buffer

    class Gathered:  # the pool's FP8 buffer: `.to(dtype)` defers the cast to the rows indexed
        def __init__(self, buf, dtype=None):
            self.buf, self.dtype = buf, dtype

        def to(self, dtype):
            return Gathered(self.buf, dtype)

        def __getitem__(self, idx):
            rows = self.buf[idx]
            return rows if self.dtype is None else rows.to(self.dtype)

    setp(stack, pool, "get_key_buffer", lambda layer_id: Gathered(right(layer_id)))


def variants(past: int) -> list[Variant]:
    """Every benign change and planted bug of the benchmark, in table order."""
    B, V = "benign", []

    def add(name, cls, fn, at="", **kw):
        V.append(Variant(name, cls, fn, at, **kw))

    add("cast fix (gather, then cast the rows)", B, lambda c, s, m: cast_fix(c, s))
    add(
        "torch.compile (the demo's exact settings)", B, lambda c, s, m: compiled(c, s, "exact"), compiles=True
    )
    add("torch.compile (inductor defaults)", B, lambda c, s, m: compiled(c, s, "defaults"), compiles=True)
    add("decode-step fusion (playbook's compile)", B, lambda c, s, m: compiled(c, s, "fusion"), compiles=True)
    add("the other decode path (static masked / per request)", B, lambda c, s, m: None, static=True)
    for label, o in [
        ("attention reimplemented (the bugs' kernel)", {}),
        ("attention in float32", {"f32": True}),
        ("attention P@V in float32", {"probs_f32": True}),
        ("attention scale folded into q", {"scale_q": True}),
        ("attention scores by einsum", {"einsum": True}),
        ("softmax as exp/sum (reordered)", {"manual_softmax": True}),
        ("split-KV attention, 2 chunks (LSE merge)", {"split_kv": 2}),
        ("split-KV attention, 4 chunks (LSE merge)", {"split_kv": 4}),
        ("attention over keys in reverse order", {"reverse": True}),
    ]:
        add(label, B, lambda c, s, m, o=o: attention(c, s, o, None))
    for label, o in [
        ("matmuls in float32", {"f32": True}),
        ("lm_head in float32", {"f32": True, "roles": {"lm_head"}}),
        ("split-K 2 (float32 partials)", {"split_k": 2}),
        ("split-K 4 (float32 partials)", {"split_k": 4}),
        ("split-K 8 (float32 partials)", {"split_k": 8}),
        ("split-K 4, summed in reverse", {"split_k": 4, "reverse": True}),
    ]:
        add(label, B, lambda c, s, m, o=o: linear(c, s, o, None))
    for label, how in [("RMSNorm as x / sqrt", "div"), ("RMSNorm by sum / n", "sum"),
                       ("RMSNorm by torch.rms_norm", "torch"), ("RMSNorm weight in float32", "f32weight")]:  # fmt: skip
        add(label, B, lambda c, s, m, h=how: norm(c, s, h))
    add("rope computed in float32", B, lambda c, s, m: rope(c, s, f32=True))
    for label, how in [("MoE: routed experts only (sparse)", "sparse"),
                       ("MoE: softmax over the top-k logits", "topk_softmax"),
                       ("MoE: SiLU*up in float32", "silu_f32")]:  # fmt: skip
        add(label, B, lambda c, s, m, h=how: moe(c, s, h))
    # planted bugs
    for pct in (2, 5, 10, 20):
        add(f"KV dequant scale +{pct}%", "bug", lambda c, s, m, p=pct: attention(c, s, {"kv_scale": p / 100}, m),
            at="dequantized KV rows", nominal=pct)  # fmt: skip
    for role, pcts in [("q_proj", (2, 5)), ("kv_proj", (5,)), ("o_proj", (2, 5, 10, 20)), ("down", (5, 10)),
                       ("lm_head", (5,))]:  # fmt: skip
        for pct in pcts:
            add(f"{role} output scale +{pct}%", "bug",
                lambda c, s, m, r=role, p=pct: linear(c, s, {"scale": {r: p / 100}}, m),
                at="KV rows as stored (its latent renormalised)" if role == "kv_proj" else f"{role} output",
                nominal=None if role == "kv_proj" else pct)  # fmt: skip
    for pct in (5, 10):
        add(f"softmax temperature off {pct}%", "bug",
            lambda c, s, m, p=pct: attention(c, s, {"temperature": 1 + p / 100}, m), at="attention scores",
            nominal=pct)  # fmt: skip
    add(
        "attention scale 1/sqrt(512), not 1/sqrt(576)",
        "bug",
        lambda c, s, m: attention(c, s, {"temperature": (576 / 512) ** 0.5}, m),
        at="attention scores",
        nominal=100 * ((576 / 512) ** 0.5 - 1),
    )
    for w in (8, 32):
        add(
            f"attention window cut to the last {w}",
            "bug",
            lambda c, s, m, w=w: attention(c, s, {"window": w}, m, at_output=True),
            at="attention output",
        )
    add(
        f"rope position +1 past position {past}",
        "bug",
        lambda c, s, m: rope(c, s, past=past, meter=m),
        at="rope output",
    )
    add("a dropped expert (expert 0)", "bug", lambda c, s, m: moe(c, s, "drop", m), at="MoE output")
    add("MoE gates not renormalised", "bug", lambda c, s, m: moe(c, s, "no_renorm", m), at="MoE output")
    add("MoE top-1 instead of top-2", "bug", lambda c, s, m: moe(c, s, "top1", m), at="MoE output")
    for eps in (1e-2, 1e-1, 1.0):
        add(f"RMSNorm epsilon 1e-6 -> {eps:g}", "bug", lambda c, s, m, e=eps: norm(c, s, "eps", e, m),
            at="RMSNorm output")  # fmt: skip
    return V
