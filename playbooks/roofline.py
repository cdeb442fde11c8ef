"""Roofline lines: what a copy's bytes cost at the device's memory bandwidth, against the measurement.

The bandwidth is a parameter: `DiagnosisContext.bandwidth_gbs` when given (a flag, or a host copy
measured by the CLI for CPU traces), else DEVICE_BANDWIDTH_GBS looked up by the trace's device name.
"""

from math import prod

from state.profiling.diagnosis import DiagnosisContext, Roofline
from state.profiling.profile import OpStat, ProfileSummary

DEVICE_BANDWIDTH_GBS = {
    "H100 PCIe": 2000.0,
    "H100 NVL": 3900.0,
    "A100-SXM4-40GB": 1555.0,
    "A100-PCIE-40GB": 1555.0,
    "A100 80GB PCIe": 1935.0,
    "H200": 4800.0,
    "H100": 3350.0,
    "H20": 4000.0,
    "B200": 8000.0,
    "A100": 2039.0,
    "RTX PRO 6000": 1792.0,
    "L40S": 864.0,
    "A10G": 600.0,
}
"""Peak HBM/GDDR bandwidth in GB/s by a substring of the device name, the first that matches
(vendor datasheets: H200 HBM3e 4.8 TB/s, H100 SXM 3.35 TB/s, H100 PCIe 2.0 TB/s, A100 80GB SXM
2.04 TB/s, ...; nvidia-smi names an H100 SXM `NVIDIA H100 80GB HBM3`)."""

ITEMSIZE = {
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "float": 4,
    "double": 8,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "short int": 2,
    "int": 4,
    "long int": 8,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}
"""Bytes per element by the profiler's input type names."""

COPY_OPS = frozenset({"aten::copy_"})
"""Ops whose inputs are (dst, src): they read src and write dst, element for element."""


def bandwidth(profile: ProfileSummary, ctx: DiagnosisContext) -> tuple[float, str] | None:
    """(GB/s, where it came from) for this profile, or None when unknown."""
    if ctx.bandwidth_gbs is not None:
        return ctx.bandwidth_gbs, ctx.bandwidth_source
    name = profile.device_name or ""
    for key, gbs in DEVICE_BANDWIDTH_GBS.items():
        if key in name:
            return gbs, name
    return None


def spec_bandwidth(device: str) -> tuple[float, str] | None:
    """(GB/s, `H100 spec`) of a device by its name from the datasheet table, or None (pure)."""
    for key, gbs in DEVICE_BANDWIDTH_GBS.items():
        if key in device:
            return gbs, f"{key} spec"
    return None


def copy_bytes(op: OpStat) -> int | None:
    """Bytes one call of a copy op reads and writes: numel(dst) x (itemsize(src) + itemsize(dst))."""
    if op.name not in COPY_OPS or len(op.input_dims) < 2 or len(op.input_types) < 2:
        return None
    dst, src = ITEMSIZE.get(op.input_types[0]), ITEMSIZE.get(op.input_types[1])
    if dst is None or src is None or not op.input_dims[0]:
        return None
    return prod(op.input_dims[0]) * (dst + src)


def roofline(op: OpStat, profile: ProfileSummary, ctx: DiagnosisContext) -> Roofline | None:
    """The roofline line of a copy op whose dims and dtypes are known, at the profile's bandwidth."""
    nbytes, bw = copy_bytes(op), bandwidth(profile, ctx)
    if nbytes is None or bw is None or op.calls == 0:
        return None
    gbs, source = bw
    ideal = nbytes / (gbs * 1e3)
    measured = op.self_us / op.calls
    dims = "x".join(map(str, op.input_dims[0]))
    pct = 100 * ideal / measured if measured else 0.0
    line = (
        f"{op.name} moves {nbytes / 1e6:.1f} MB per call ({dims} elements x "
        f"({ITEMSIZE[op.input_types[1]]}+{ITEMSIZE[op.input_types[0]]}) B): {ideal:.1f} us at "
        f"{gbs:.0f} GB/s ({source}); measured {measured:.1f} us per call on the {profile.time_basis} "
        f"({pct:.0f}% of that bandwidth)"
    )
    return Roofline(
        op=op.name,
        bytes_per_call=nbytes,
        bandwidth_gbs=gbs,
        bandwidth_source=source,
        ideal_us_per_call=ideal,
        measured_us_per_call=measured,
        line=line,
    )
