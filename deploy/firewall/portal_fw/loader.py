"""Load one nft file by libnftables and answer when the kernel committed it, not at exit.

Run by nft.load_full as its own process (``python3 -IS loader.py FILE``; standard library
only, so that it runs without the package on its path). It loads FILE the way ``nft -f FILE``
does (libnftables is nft's own library: the same parser, the same one transaction), then
writes one JSON line to stdout, ``{"rc": 0|1, "error": "..."}``, closes stdout and exits
without freeing anything.

Why not ``nft -f``: when the transaction deleted tables (a full replacement), the kernel frees
their elements after the commit, in a work queue; the process that closes its nftables
netlink socket waits for that work to finish (``nft_rcv_nl_event`` flushes it), about 0.65 s
at 100,000 members (1.5 million elements). ``nft -f`` closes its socket at exit, so its exit
code comes that long after the new rule set went live. Here the answer is written before the
socket is closed; the parent reads it and reaps the process later (its exit still waits for
the kernel, the answer does not). Also skipped: nft's own freeing of its parse tree at exit.

Exit code 3 (and no line): libnftables could not be loaded; the caller falls back to nft -f.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

LIBRARY = "libnftables.so.1"
NO_LIBRARY = 3
ERROR_MAX = 16000  # the last characters of nft's messages (the line stays one pipe write)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: loader.py FILE\n")
        return 2
    try:
        lib = ctypes.CDLL(LIBRARY)
    except OSError as exc:
        sys.stderr.write(f"{LIBRARY}: {exc}\n")
        return NO_LIBRARY
    lib.nft_ctx_new.restype = ctypes.c_void_p
    lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
    lib.nft_ctx_buffer_output.argtypes = [ctypes.c_void_p]
    lib.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
    lib.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
    lib.nft_ctx_get_error_buffer.argtypes = [ctypes.c_void_p]
    lib.nft_run_cmd_from_filename.restype = ctypes.c_int
    lib.nft_run_cmd_from_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ctx = lib.nft_ctx_new(0)  # NFT_CTX_DEFAULT
    if not ctx:
        sys.stderr.write("nft_ctx_new failed\n")
        return NO_LIBRARY
    lib.nft_ctx_buffer_output(ctx)
    lib.nft_ctx_buffer_error(ctx)
    rc = lib.nft_run_cmd_from_filename(ctx, os.fsencode(argv[1]))
    error = (lib.nft_ctx_get_error_buffer(ctx) or b"").decode("utf-8", "replace")[-ERROR_MAX:]
    line = json.dumps({"rc": 0 if rc == 0 else 1, "error": error}) + "\n"
    os.write(1, line.encode("utf-8"))
    os.close(1)
    # No nft_ctx_free: the exit closes the socket (and waits for the kernel), after the answer.
    os._exit(0 if rc == 0 else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
