"""Array conversion between numpy and torch, in one place.

:func:`as_array` turns the caller's (n, d) input — numpy, torch or array-like — into a floating
numpy array and a token; :func:`to_like` turns a numpy result back into the caller's type (a torch
tensor of the original dtype and device, or numpy). Integer and bool inputs compute in float64.
:func:`torch_input` validates a torch tensor the same way but keeps it on its device (no host
copy), for the rules and attacks that compute with torch operations.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError

__all__ = ["is_torch", "torch_to_numpy", "torch_input", "as_array", "to_like", "check_shape"]


def is_torch(X: Any) -> bool:
    return hasattr(X, "detach") and hasattr(X, "cpu") and hasattr(X, "layout")


def _check_tensor(X: Any, name: str) -> None:
    import torch

    if X.layout != torch.strided:
        raise FedAuditError(f"{name} must be a dense torch tensor, got a sparse tensor (layout {X.layout}); "
                            "call .to_dense() first")
    if X.is_meta or X.device.type == "meta":
        raise FedAuditError(f"{name} must hold data, got a meta tensor (device 'meta', dtype {X.dtype})")
    if X.is_complex():
        raise FedAuditError(f"{name} must hold real numbers, got complex torch dtype {X.dtype}")


def torch_to_numpy(X: Any, name: str) -> tuple[Any, Any]:
    import torch

    _check_tensor(X, name)
    out_dtype = X.dtype if X.is_floating_point() else torch.float64
    X = X.detach().cpu()
    if X.dtype == torch.bfloat16:  # numpy has no bfloat16: compute in float32
        X = X.float()
    return X.numpy(), out_dtype


def torch_input(X: Any, name: str = "vectors") -> tuple[Any, Any]:
    """(n, d) floating tensor on X's own device and the torch dtype a result is returned in.

    Validated like :func:`as_array` (same messages). float32 and float64 are used as they are
    (no copy); float16, bfloat16 and other narrow floats compute in float32 and are returned in
    their dtype; integer and bool tensors compute and are returned in float64.
    """
    import torch

    _check_tensor(X, name)
    X = X.detach()
    out_dtype = X.dtype if X.is_floating_point() else torch.float64
    if not X.is_floating_point():
        X = X.to(torch.float64)
    elif X.dtype not in (torch.float32, torch.float64):
        X = X.to(torch.float32)
    check_shape(tuple(X.shape), name)
    return X, out_dtype


def check_shape(shape: tuple[int, ...], name: str) -> None:
    """Raise :class:`FedAuditError` unless ``shape`` is (n, d) with n, d ≥ 1."""
    if len(shape) != 2:
        raise FedAuditError(f"{name} must be a 2-D array (n, d), got shape {shape}")
    if shape[0] < 1 or shape[1] < 1:
        raise FedAuditError(f"{name} must have at least one row and one column, got shape {shape}")


def as_array(X: Any, name: str = "vectors") -> tuple[np.ndarray, Any]:
    """(n, d) floating numpy view of X (numpy, torch or array-like) and a token for :func:`to_like`.

    Floating dtypes are kept; integer, unsigned and bool inputs become float64 (so the result
    dtype, ``arr.dtype``, is float64 for them). Complex, string, object and datetime data,
    sparse and meta tensors raise :class:`FedAuditError` naming the type.
    """
    token = None
    if is_torch(X):
        device = X.device
        X, torch_dtype = torch_to_numpy(X, name)
        token = (torch_dtype, device)
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as err:
        raise FedAuditError(f"{name} must be a 2-D array of real numbers (n, d), got {type(X).__name__} "
                            f"that numpy cannot convert ({err})") from None
    kind = arr.dtype.kind
    if kind in "biu":
        arr = arr.astype(np.float64)
    elif kind == "c":
        raise FedAuditError(f"{name} must hold real numbers, got complex dtype {arr.dtype}")
    elif kind != "f":
        raise FedAuditError(f"{name} must hold real numbers (float, int or bool), got dtype {arr.dtype} "
                            f"({type(X).__name__})")
    check_shape(arr.shape, name)
    return arr, token


def to_like(result: np.ndarray, token: Any, dtype: np.dtype) -> Any:
    """Convert a numpy result back to the caller's type (torch: the token's dtype and device)."""
    with np.errstate(over="ignore"):
        result = np.asarray(result, dtype=dtype)
    if token is None:
        return result
    import torch

    torch_dtype, device = token
    return torch.from_numpy(np.ascontiguousarray(result)).to(device=device, dtype=torch_dtype)
