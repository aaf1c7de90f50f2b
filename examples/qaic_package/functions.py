"""Hooks of the example package (docs/packages.md, "functions"): each takes the op first,
then one TensorSpec per input, like the dsl.Op hooks they extend."""
import dsl


def verify(op, *inputs):
    """RMSNorm: w scales the last axis of x, so its length must be that axis's."""
    if op.op_type == "RMSNorm":
        x, w = inputs
        if x.ndim == 0:
            raise dsl.VerifyError(f"RMSNorm input x must have at least one axis, got {x}")
        if None not in (x.shape[-1], w.shape[0]) and x.shape[-1] != w.shape[0]:
            raise dsl.VerifyError(f"RMSNorm weight w {w} must have the length of x's last axis ({x.shape[-1]})")


def select(op, *inputs, backend):
    """CustomRelu on OpenCL: the raw kernel written for the input's dtype."""
    if op.op_type == "CustomRelu" and backend == "opencl":
        return "custom_relu_f16" if inputs[0].dtype == dsl.f16 else "custom_relu_f32"
    return {"CustomRelu": "custom_relu", "RMSNorm": "rms_norm"}[op.op_type]


def tiling(op, *inputs):
    """RMSNorm rows are independent: its output may be cut along any axis but the last (the
    guide's setTileConfig).  The other ops stay untiled."""
    if op.op_type != "RMSNorm" or inputs[0].ndim < 2:
        return None
    return {axis: 1 for axis in range(inputs[0].ndim - 1)}


def map_tiles(op, out_tile, *inputs):
    """An RMSNorm output tile reads the same rows of x and all of w (the guide's mapTiles)."""
    (y_tile,) = out_tile  # one slice per axis of y; the last axis is never cut
    return [y_tile, None]
