"""Array conversion between numpy and torch, in one place.

:func:`as_array` turns the caller's (n, d) input — numpy, torch or array-like — into a floating
numpy array and a token; :func:`to_like` turns a numpy result back into the caller's type (a torch
tensor of the original dtype and device, or numpy). Integer and bool inputs compute in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError

__all__ = ["is_torch", "torch_to_numpy", "as_array", "to_like"]


def is_torch(X: Any) -> bool:
    return hasattr(X, "detach") and hasattr(X, "cpu") and hasattr(X, "layout")


def torch_to_numpy(X: Any, name: str) -> tuple[Any, Any]:
    import torch

    if X.layout != torch.strided:
        raise FedAuditError(f"{name} must be a dense torch tensor, got a sparse tensor (layout {X.layout}); "
                            "call .to_dense() first")
    if X.is_meta or X.device.type == "meta":
        raise FedAuditError(f"{name} must hold data, got a meta tensor (device 'meta', dtype {X.dtype})")
    if X.is_complex():
        raise FedAuditError(f"{name} must hold real numbers, got complex torch dtype {X.dtype}")
    out_dtype = X.dtype if X.is_floating_point() else torch.float64
    X = X.detach().cpu()
    if X.dtype == torch.bfloat16:  # numpy has no bfloat16: compute in float32
        X = X.float()
    return X.numpy(), out_dtype


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
    if arr.ndim != 2:
        raise FedAuditError(f"{name} must be a 2-D array (n, d), got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise FedAuditError(f"{name} must have at least one row and one column, got shape {arr.shape}")
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
