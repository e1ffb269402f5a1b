"""Independent, deliberately simple reference implementations for the golden-model tests.

They loop bag by bag and occurrence by occurrence, the way the contract is worded, so they share
no code with the vectorised kernels under test.
"""

import numpy as np


def same_bits(a, b) -> bool:
    """Bitwise equality of float arrays, counting any two NaNs as equal."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ints = {4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    differ = (a.view(ints) != b.view(ints)) & ~(np.isnan(a) & np.isnan(b))
    return not differ.any()


def bags(indices, offsets, total=None):
    """(start, end) of each bag, torch form (the last bag runs to `total`)."""
    total = len(indices) if total is None else total
    ends = [*offsets[1:], total]
    return list(zip(offsets, ends, strict=True))


def reference_pool(weight, indices, offsets, mode="sum", per_sample_weights=None):
    """One bag at a time, one row at a time, float32."""
    out = np.zeros((len(offsets), weight.shape[1]), dtype=np.float32)
    with np.errstate(all="ignore"):
        for b, (start, end) in enumerate(bags(indices, offsets)):
            acc = np.zeros(weight.shape[1], dtype=np.float32)
            for i in range(start, end):
                row = weight[indices[i]]
                if per_sample_weights is not None:
                    row = row * per_sample_weights[i]
                acc = acc + row
            if mode == "mean" and end > start:
                acc = acc * (np.float32(1) / np.float32(end - start))
            out[b] = acc
    return out


def reference_pool64(weight, indices, offsets, mode="sum", per_sample_weights=None):
    """Float64 pooling for tolerance and finite-difference checks."""
    weight = np.asarray(weight, dtype=np.float64)
    out = np.zeros((len(offsets), weight.shape[1]))
    for b, (start, end) in enumerate(bags(indices, offsets)):
        for i in range(start, end):
            w = 1.0 if per_sample_weights is None else float(per_sample_weights[i])
            out[b] += w * weight[indices[i]]
        if mode == "mean" and end > start:
            out[b] /= end - start
    return out


def tbe_occurrences(indices, offsets, num_tables):
    """(table, bag, position, row) of every index in TBE order."""
    batch = (len(offsets) - 1) // num_tables
    result = []
    for t in range(num_tables):
        for b in range(batch):
            start, end = offsets[t * batch + b], offsets[t * batch + b + 1]
            for i in range(start, end):
                result.append((t, b, i, int(indices[i])))
    return result


def reference_sparse_sgd(
    weights, grad_out, indices, offsets, modes, lr, per_sample_weights=None, max_unique_rows=None,
    states=None,
):
    """The contract's words as a loop: contributions in TBE order, chunks, one update per row.
    ``states``: a list that gets a copy of the tables after each chunk."""
    tables = [w.copy() for w in weights]
    num_tables = len(tables)
    batch = (len(offsets) - 1) // num_tables
    columns = np.cumsum([0, *(w.shape[1] for w in tables)])
    lr = np.float32(lr)
    chunks, pending = [], {}

    def close():
        for (t, row), g_sum in pending.items():
            tables[t][row] = tables[t][row] - lr * g_sum
        chunks.append(list(pending))
        pending.clear()
        if states is not None:
            states.append([table.copy() for table in tables])

    with np.errstate(all="ignore"):
        for t, b, i, row in tbe_occurrences(indices, offsets, num_tables):
            g = grad_out[b, columns[t] : columns[t + 1]]
            if per_sample_weights is not None:
                g = g * per_sample_weights[i]
            elif modes[t] == "mean":
                length = offsets[t * batch + b + 1] - offsets[t * batch + b]
                g = g * (np.float32(1) / np.float32(length))
            key = (t, row)
            if key not in pending and max_unique_rows is not None:
                if len(pending) == max_unique_rows:
                    close()
            pending[key] = pending.get(key, np.zeros_like(g)) + g
        if pending:
            close()
    return tables, chunks


def reference_relaxed(old_tables, new_tables, updated_rows, indices, offsets, modes,
                      per_sample_weights=None, chunks=None):
    """Relaxed lookup in the definition's words, one bag and one occurrence at a time.
    ``chunks``: for a chunked update, ``(before, after, keys)`` per chunk (the tables before
    and after it and its (table, row) keys): each chunk then corrects in turn.

    Returns (pooled, corrections per (table, bag)).
    """
    num_tables = len(old_tables)
    modes = (modes,) * num_tables if isinstance(modes, str) else modes
    batch = (len(offsets) - 1) // num_tables
    updated = [{int(r) for r in rows} for rows in updated_rows]
    blocks, corrections = [], np.zeros((num_tables, batch), dtype=np.int64)
    with np.errstate(all="ignore"):
        for t in range(num_tables):
            old = old_tables[t]
            out = np.zeros((batch, old.shape[1]), dtype=np.float32)
            for b in range(batch):
                start, end = offsets[t * batch + b], offsets[t * batch + b + 1]

                def weighted(row, i):
                    return row if per_sample_weights is None else row * per_sample_weights[i]

                acc = np.zeros(old.shape[1], dtype=np.float32)
                for i in range(start, end):  # the stale gather
                    acc = acc + weighted(old[indices[i]], i)
                passes = ([(old_tables, new_tables, {(t, r) for r in updated[t]})]
                          if chunks is None else chunks)
                for before, after, keys in passes:  # the corrections, in index order
                    for i in range(start, end):
                        r = int(indices[i])
                        if (t, r) in keys:
                            acc = acc + weighted(after[t][r] - before[t][r], i)
                            corrections[t, b] += 1
                if modes[t] == "mean" and end > start:
                    acc = acc * (np.float32(1) / np.float32(end - start))
                out[b] = acc
            blocks.append(out)
    return np.concatenate(blocks, axis=1), corrections
