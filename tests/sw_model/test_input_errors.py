"""Every bad input is rejected with an error that names the problem."""

import numpy as np
import pytest

from sw_model import embedding_bag, embedding_bag_tbe, embedding_bag_tbe_grad, sparse_sgd_update

F32 = np.float32
TABLE = np.zeros((10, 16), dtype=F32)
I64 = np.int64


def bag(indices, offsets, **kwargs):
    return embedding_bag(TABLE, np.array(indices, dtype=I64), np.array(offsets, dtype=I64),
                         **kwargs)


@pytest.mark.parametrize(
    ("indices", "offsets", "message"),
    [
        ([1, 2, 10], [0, 2],
         r"index 10 at indices\[2\] \(bag 1, position 0\) is out of range for a table of 10 rows"),
        ([1, -1], [0], r"indices\[1\] = -1 is negative"),
        ([1, 2, 3], [0, 2, 1],
         r"offsets decrease at position 2: offsets\[2\] = 1 < offsets\[1\] = 2"),
        ([1, 2], [0, 3], r"offsets\[1\] = 3 is past the end of indices \(2 indices\)"),
        ([1, 2], [1], r"offsets\[0\] must be 0, got 1"),
        ([1, 2], [0, -1], r"offsets\[1\] = -1 is negative"),
        ([1, 2], [], r"offsets is empty \(no bags\) but there are 2 indices"),
    ],
)
def test_bad_indices_and_offsets(indices, offsets, message):
    with pytest.raises(ValueError, match=message):
        bag(indices, offsets)


@pytest.mark.parametrize("dtype", [np.float64, np.uint64, np.int16, np.bool_])
def test_index_dtype_must_be_int32_int64_or_uint32(dtype):
    with pytest.raises(TypeError, match=r"indices must be an integer array of dtype int32, int64"):
        embedding_bag(TABLE, np.array([1, 0], dtype=dtype), np.array([0]))
    with pytest.raises(TypeError, match=r"offsets must be an integer array"):
        embedding_bag(TABLE, np.array([1]), np.array([0], dtype=dtype))


def test_index_shape_must_be_1d():
    with pytest.raises(ValueError, match=r"indices must be 1-D, got shape \(1, 2\)"):
        embedding_bag(TABLE, np.array([[1, 2]]), np.array([0]))


@pytest.mark.parametrize(
    ("weight", "error", "message"),
    [
        (np.zeros((10, 16)), TypeError, r"weight must have dtype float32, got float64"),
        (np.zeros(16, dtype=F32), ValueError, r"weight must be 2-D \(rows, D\), got shape \(16,\)"),
        ([[0.0]], TypeError, r"weight must be a numpy array, got list"),
    ],
)
def test_bad_weight(weight, error, message):
    with pytest.raises(error, match=message):
        embedding_bag(weight, np.array([0]), np.array([0]))


def test_bad_mode():
    with pytest.raises(ValueError, match=r"mode must be 'sum' or 'mean', got 'max'"):
        bag([0], [0], mode="max")


@pytest.mark.parametrize(
    ("psw", "mode", "error", "message"),
    [
        (np.ones(3, dtype=F32), "sum", ValueError,
         r"per_sample_weights has 3 entries but indices has 2"),
        (np.ones(2), "sum", TypeError, r"per_sample_weights must have dtype float32, got float64"),
        ([1.0, 1.0], "sum", TypeError, r"per_sample_weights must be a float32 numpy array"),
        (np.ones((2, 1), dtype=F32), "sum", ValueError, r"per_sample_weights must be 1-D"),
        (np.ones(2, dtype=F32), "mean", ValueError,
         r"per_sample_weights are only supported with mode 'sum', got mode 'mean'"),
    ],
)
def test_bad_per_sample_weights(psw, mode, error, message):
    with pytest.raises(error, match=message):
        bag([0, 1], [0], mode=mode, per_sample_weights=psw)


# ---- TBE form --------------------------------------------------------------------------------

TABLES = [np.zeros((10, 16), dtype=F32), np.zeros((4, 16), dtype=F32)]


def tbe(indices, offsets, modes="sum", psw=None, tables=TABLES):
    return embedding_bag_tbe(tables, np.array(indices, dtype=I64), np.array(offsets, dtype=I64),
                             modes, psw)


@pytest.mark.parametrize(
    ("indices", "offsets", "message"),
    [
        ([1, 2, 3, 4], [0, 1, 2, 2, 4],
         r"index 4 at indices\[3\] \(table 1, bag 1, position 1\) is out of range for a table "
         r"of 4 rows"),
        ([1, 2, 3], [0, 1, 2, 3], r"offsets has 4 entries; with 2 tables it must have B\*2 \+ 1"),
        ([1, 2, 3], [0, 1, 2, 2, 2],
         r"the last offset \(offsets\[4\] = 2\) must equal the number of indices \(3\)"),
        ([1, 2, 3], [0, 2, 1, 2, 3], r"offsets decrease at position 2"),
        ([1, 2, 3], [0, 1, 2, 3, 5], r"offsets\[4\] = 5 is past the end of indices"),
        ([1], [], r"offsets has 0 entries; with 2 tables it must have B\*2 \+ 1 entries"),
    ],
)
def test_bad_tbe_indices_and_offsets(indices, offsets, message):
    with pytest.raises(ValueError, match=message):
        tbe(indices, offsets)


def test_bad_tbe_tables_and_modes():
    with pytest.raises(ValueError, match=r"modes has 3 entries but there are 2 tables"):
        tbe([0], [0, 1, 1], modes=("sum", "sum", "sum"))
    with pytest.raises(ValueError, match=r"modes\[1\] must be 'sum' or 'mean', got 'none'"):
        tbe([0], [0, 1, 1], modes=("sum", "none"))
    with pytest.raises(TypeError, match=r"weights\[1\] must have dtype float32, got float64"):
        tbe([0], [0, 1, 1], tables=[TABLES[0], np.zeros((4, 16))])
    with pytest.raises(TypeError, match=r"weights must be a list of 2-D float32 tables"):
        tbe([0], [0, 1], tables=TABLES[0])
    with pytest.raises(ValueError, match=r"weights must contain at least one table"):
        tbe([], [0], tables=[])
    with pytest.raises(
        ValueError,
        match=r"per_sample_weights are only supported with mode 'sum', got mode 'mean' \(table 1\)",
    ):
        tbe([0, 1], [0, 1, 2], modes=("sum", "mean"), psw=np.ones(2, dtype=F32))


# ---- sparse update ---------------------------------------------------------------------------


def update(grad=None, lr=0.1, **kwargs):
    grad = np.zeros((1, 32), dtype=F32) if grad is None else grad
    return sparse_sgd_update(TABLES, grad, np.array([1, 2]), np.array([0, 1, 2]), "sum", lr,
                             **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(grad=np.zeros((1, 16), dtype=F32)), ValueError,
         r"grad_out must have shape \(B, sum D\) = \(1, 32\), got \(1, 16\)"),
        (dict(grad=np.zeros((2, 32), dtype=F32)), ValueError,
         r"grad_out must have shape \(B, sum D\) = \(1, 32\), got \(2, 32\)"),
        (dict(grad=np.zeros((1, 32))), TypeError, r"grad_out must have dtype float32, got float64"),
        (dict(grad=[[0.0] * 32]), TypeError, r"grad_out must be a numpy array"),
        (dict(lr=float("nan")), ValueError, r"lr must be finite, got nan"),
        (dict(lr="0.1"), TypeError, r"lr must be a real number, got str"),
        (dict(max_unique_rows=0), ValueError, r"max_unique_rows must be at least 1, got 0"),
        (dict(max_unique_rows=True), TypeError, r"max_unique_rows must be an int or None"),
        (dict(max_unique_rows=2.0), TypeError, r"max_unique_rows must be an int or None"),
    ],
)
def test_bad_update_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        update(**kwargs)


def test_update_checks_index_range_before_touching_tables():
    tables = [t.copy() for t in TABLES]
    with pytest.raises(ValueError, match=r"index 7 at indices\[1\] \(table 1, bag 0, position 0\)"):
        sparse_sgd_update(tables, np.ones((1, 32), dtype=F32), np.array([1, 7]),
                          np.array([0, 1, 2]), "sum", 0.1, inplace=True)
    assert all((t == 0).all() for t in tables)


def test_gradient_helper_accepts_only_float_grads():
    with pytest.raises(TypeError, match=r"grad_out must have dtype float32 or float64, got int64"):
        embedding_bag_tbe_grad(TABLES, np.zeros((1, 32), dtype=I64), np.array([1, 2]),
                               np.array([0, 1, 2]), "sum")
