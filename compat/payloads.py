"""Payloads that look like what people upload, generated from a seed
(reproducible, nothing downloaded), for compat/bench_transfer.py.

    random  bytes from SHAKE-128, which hf_xet stores uncompressed (written
            by the benches' own helpers, bench_transfer.write_source and
            conftest.write_random, as before this module)
    bf16    a weight tensor N(0, 0.02²) as bfloat16, as a model's safetensors
            holds it: hf_xet's byte-grouping LZ4 (BG4-LZ4) shrinks it ~10 %
    fp32    the same as float32 (BG4-LZ4 shrinks it ~2 %)
    int8    the same quantized to int8 per block of 4096 (absmax): LZ4 does
            not shrink it, so hf_xet stores it uncompressed
    json    a tokenizer.json-like vocabulary (LZ4 halves it)
    parquet a table of ids, scores, labels and sentences written by pyarrow
            (Snappy pages: little for LZ4 to take)

A safetensors file is a JSON header and the tensors' raw bytes; the header
is a few KiB of a multi-GiB file, so the tensors alone stand for it.
"""

import hashlib
import io

import numpy as np

KINDS = ("random", "bf16", "fp32", "int8", "json", "parquet")
_BLOCK = 1 << 24  # bytes generated per step, so memory stays bounded


def _weights(rng, n):
    return rng.normal(0.0, 0.02, n).astype(np.float32)


def _bf16(rng, nbytes):
    w = _weights(rng, nbytes // 2)
    return (w.view(np.uint32) >> 16).astype(np.uint16).tobytes()


def _fp32(rng, nbytes):
    return _weights(rng, nbytes // 4).tobytes()


def _int8(rng, nbytes):
    w = _weights(rng, nbytes).reshape(-1, 4096)
    scale = np.abs(w).max(axis=1, keepdims=True) / 127.0
    return np.clip(np.rint(w / scale), -127, 127).astype(np.int8).tobytes()


_SYLLABLES = ["an", "er", "in", "on", "th", "re", "at", "st", "ing", "ed", "ou", "es", "Ġ", "al", "ion", "ly",
              "pre", "un", "de", "co", "mp", "ent", "ter", "ra", "la", "ti", "ic", "ro", "ma", "na", "ke", "lo"]


def _words(rng, n):
    """n made-up subword tokens, from one to four syllables each."""
    syl = np.array(_SYLLABLES)
    parts = syl[rng.integers(0, len(syl), (n, 4))]
    lengths = rng.integers(1, 5, n)
    return ["".join(p[:k]) for p, k in zip(parts, lengths)]


def _json(rng, nbytes):
    out, n, i = [], 0, 0
    head = '{"model": {"type": "BPE", "vocab": {'
    out.append(head)
    n += len(head)
    while n < nbytes:
        for word in _words(rng, 1 << 16):
            entry = '"' + word + '": ' + str(i) + ", "
            out.append(entry)
            n += len(entry)
            i += 1
    return "".join(out).encode()[:nbytes]


def _parquet(rng, f, nbytes):
    """Write row groups of one Parquet file to f until it holds nbytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    words = np.array(_words(rng, 4096))
    rows, first = 1 << 17, 0
    with pq.ParquetWriter(f, pa.schema([("id", pa.int64()), ("score", pa.float32()),
                                        ("label", pa.int8()), ("text", pa.string())])) as w:
        while f.tell() < nbytes:
            w.write_table(pa.table({
                "id": np.arange(first, first + rows, dtype=np.int64),
                "score": rng.random(rows, dtype=np.float32),
                "label": rng.integers(0, 10, rows, dtype=np.int8),
                "text": [" ".join(r) for r in words[rng.integers(0, 4096, (rows, 8))].tolist()],
            }))
            first += rows


def write(path, kind, seed, size):
    """Write about size bytes of payload kind (any but random), derived from
    seed, to path; returns the size written (exactly size, but for parquet,
    which ends at a row group)."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "little"))
    with open(path, "wb") as f:
        if kind == "parquet":
            _parquet(rng, f, size)
            return f.tell()
        gen = {"bf16": _bf16, "fp32": _fp32, "int8": _int8, "json": _json}.get(kind)
        written = 0
        while written < size:
            step = min(_BLOCK, size - written)
            block = gen(rng, step)[:step]
            f.write(block)
            written += len(block)
    return written
