"""Page-cache-bypassing file I/O shared by the file benchmark and the real swapping optimizer.

Files are opened with ``O_DIRECT`` when the filesystem accepts it; buffers are anonymous
``mmap`` regions (page aligned, as O_DIRECT needs) that torch tensors view through
``torch.frombuffer``. Where O_DIRECT is refused, files are opened buffered and every write batch
ends with ``fsync`` + ``posix_fadvise(DONTNEED)`` and every read batch starts with
``posix_fadvise(DONTNEED)``, so the data comes from the device, not the page cache.

An aio queue is emulated by a pool of ``queue_depth * thread_count`` worker threads, each
issuing ``block_size`` ``preadv``/``pwritev`` calls (the GIL is released during the syscall).
The workers take the next request of a batch from a shared queue as soon as their previous one
completes, so ``N`` requests stay outstanding until the batch drains (as an aio ring refilled on
completion; a fixed per-worker split would leave workers idle behind a slow one).
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim.calibration.placement import pin_current_thread

if TYPE_CHECKING:  # pragma: no cover
    import torch

ALIGN = 4096
O_DIRECT_MODE = "O_DIRECT"
FSYNC_MODE = "fsync+posix_fadvise(DONTNEED)"


def align_up(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


def probe_bypass_mode(directory: Path) -> str:
    """Which page-cache bypass ``directory`` allows: O_DIRECT if an aligned O_DIRECT write and
    read succeed, else fsync + posix_fadvise(DONTNEED)."""
    if not hasattr(os, "O_DIRECT"):
        return FSYNC_MODE
    path = Path(directory) / f".tiersim-odirect-probe-{os.getpid()}-{threading.get_ident()}"
    buf = mmap.mmap(-1, ALIGN)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return FSYNC_MODE
    try:
        buf.write(b"\x5a" * ALIGN)
        if os.pwritev(fd, [buf], 0) != ALIGN or os.preadv(fd, [buf], 0) != ALIGN:
            return FSYNC_MODE
        return O_DIRECT_MODE
    except OSError:
        return FSYNC_MODE
    finally:
        os.close(fd)
        buf.close()
        try:
            path.unlink()
        except OSError:
            pass


class AlignedBuffer:
    """A page-aligned anonymous memory region (a stand-in for a pinned buffer on CPU-only hosts;
    with CUDA it is page-locked with cudaHostRegister when ``pin`` is set)."""

    def __init__(self, nbytes: int, pin: bool = False) -> None:
        self.nbytes = align_up(max(nbytes, 1))
        self.mm = mmap.mmap(-1, self.nbytes)
        self.view = memoryview(self.mm)
        self.pinned = False
        if pin:
            self.pinned = _cuda_host_register(self)

    def tensor(self, numel: int, dtype: torch.dtype | None = None, offset: int = 0) -> torch.Tensor:
        """A tensor of ``numel`` elements viewing this memory from byte ``offset``."""
        import torch

        return torch.frombuffer(self.mm, dtype=dtype or torch.float32, count=numel, offset=offset)

    def close(self) -> None:
        try:
            self.view.release()
            self.mm.close()
        except BufferError:
            pass  # a tensor still views it; freed with the tensor

    def window(self, offset: int, nbytes: int) -> BufferWindow:
        """``nbytes`` of this buffer from ``offset`` (page aligned), used like a buffer of its own."""
        return BufferWindow(self, offset, nbytes)


class BufferWindow:
    """A page-aligned part of an ``AlignedBuffer``: several users (the swap buffers of each
    validation case, the drift probe) share the same memory, whose physical placement sets how
    fast a virtual disk fills it (see ``tiersim.validation.runner``)."""

    def __init__(self, parent: AlignedBuffer, offset: int, nbytes: int) -> None:
        if offset % ALIGN or offset < 0 or offset + nbytes > parent.nbytes:
            raise ValueError(f"window [{offset}, {offset + nbytes}) is not an aligned part of {parent.nbytes} bytes")
        self.parent = parent
        self.offset = offset
        self.nbytes = nbytes
        self.view = parent.view[offset:offset + nbytes]

    def tensor(self, numel: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return self.parent.tensor(numel, dtype, self.offset)

    def close(self) -> None:
        self.view.release()


def _cuda_host_register(buf: AlignedBuffer) -> bool:
    try:
        import ctypes

        import torch

        if not torch.cuda.is_available():
            return False
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(buf.mm))
        rc = torch.cuda.cudart().cudaHostRegister(ptr, buf.nbytes, 0)
        return int(rc) == 0 if not isinstance(rc, tuple) else int(rc[0]) == 0
    except Exception:  # noqa: BLE001 - pinning is best effort
        return False


@dataclass
class Segment:
    """One transfer: ``length`` bytes between ``view[buf_offset:]`` and ``fd`` at ``file_offset``."""

    fd: int
    view: memoryview
    buf_offset: int
    file_offset: int
    length: int


class DirectFile:
    """A file opened for page-cache-bypassing I/O in ``mode`` (see ``probe_bypass_mode``)."""

    def __init__(self, path: Path, mode: str, create_size: int | None = None) -> None:
        self.path = Path(path)
        self.mode = mode
        flags = os.O_RDWR | os.O_CREAT
        if mode == O_DIRECT_MODE:
            flags |= os.O_DIRECT
        self.fd = os.open(self.path, flags, 0o600)
        if create_size is not None:
            os.ftruncate(self.fd, align_up(create_size))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def unlink(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except OSError:
            pass


def split_blocks(segments: Sequence[Segment], block_size: int) -> list[tuple[int, memoryview, int, int]]:
    """Segments -> (fd, view slice, file offset, length) requests of at most ``block_size``."""
    blocks = []
    for seg in segments:
        done = 0
        while done < seg.length:
            n = min(block_size, seg.length - done)
            start = seg.buf_offset + done
            blocks.append((seg.fd, seg.view[start : start + n], seg.file_offset + done, n))
            done += n
    return blocks


class _BlockQueue:
    """The requests of one batch, handed out in order to whichever worker is free."""

    def __init__(self, blocks: list[tuple[int, memoryview, int, int]]) -> None:
        self.blocks = blocks
        self.next = 0
        self.lock = threading.Lock()

    def take(self) -> tuple[int, memoryview, int, int] | None:
        with self.lock:
            if self.next >= len(self.blocks):
                return None
            block = self.blocks[self.next]
            self.next += 1
            return block


def _drain(op: str, queue: _BlockQueue) -> int:
    """One worker: issue requests from ``queue`` one at a time until it is empty."""
    total = 0
    while (block := queue.take()) is not None:
        total += _do_blocks(op, [block])
    return total


def _do_blocks(op: str, blocks: list[tuple[int, memoryview, int, int]]) -> int:
    total = 0
    io = os.preadv if op == "read" else os.pwritev
    for fd, view, offset, length in blocks:
        done = 0
        while done < length:
            n = io(fd, [view[done:]], offset + done)
            if n <= 0:
                raise OSError(f"short {op} at offset {offset + done} (got {n})")
            done += n
        total += length
    return total


class IOHandle:
    """An issued batch; ``wait()`` blocks until all its requests are done and returns bytes moved."""

    def __init__(self, futures: list[Future[int]], after: object = None) -> None:
        self.futures = futures
        self.after = after
        self.bytes: int | None = None

    def wait(self) -> int:
        if self.bytes is None:
            self.bytes = sum(f.result() for f in self.futures)
            if callable(self.after):
                self.after()
        return self.bytes


class IOPool:
    """``workers`` threads, each with its own in-order list of requests (one outstanding request
    per worker: ``workers = queue_depth * thread_count`` emulates the aio queue), bound to
    ``cpus`` when given (see ``tiersim.calibration.placement``)."""

    def __init__(self, workers: int, block_size: int, mode: str, cpus: set[int] | None = None) -> None:
        if workers < 1 or block_size < ALIGN or block_size % ALIGN:
            raise ValueError(f"need workers >= 1 and block_size a multiple of {ALIGN}")
        self.workers = workers
        self.block_size = block_size
        self.mode = mode
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tiersim-aio",
                                       initializer=pin_current_thread, initargs=(cpus,))

    def submit(self, op: str, segments: Sequence[Segment]) -> IOHandle:
        if op not in ("read", "write"):
            raise ValueError(op)
        fds = sorted({s.fd for s in segments})
        if op == "read" and self.mode == FSYNC_MODE:
            for fd in fds:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        blocks = split_blocks(segments, self.block_size)
        # The N outstanding requests sweep the tensors front to back together, each worker
        # taking the next request when its last one completes (an aio queue with N slots).
        queue = _BlockQueue(blocks)
        futures = [self.pool.submit(_drain, op, queue) for _ in range(min(self.workers, len(blocks)))]
        after = None
        if op == "write" and self.mode == FSYNC_MODE:

            def after() -> None:
                for fd in fds:
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

        return IOHandle(futures, after)

    def run(self, op: str, segments: Sequence[Segment]) -> int:
        return self.submit(op, segments).wait()

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def __enter__(self) -> IOPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
