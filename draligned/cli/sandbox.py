"""`draligned sandbox run WORKSPACE_DIR -- COMMAND [ARGS...]`: one command in the shell tool's sandbox.

Same bubblewrap options, rlimits, timeout and output cap as the H-W/H-D shell tool (read
from the H-W contract), so anyone can inspect the isolation by hand: ``env``, ``cat
/proc/1/cmdline``, ``cat /proc/self/mountinfo``, writes outside ``/workspace``, network.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from draligned.cli import add_command
from draligned.harness import load_contract
from draligned.sandbox import SandboxLimits, SandboxUnavailable, bwrap_options, run_in_sandbox, sandbox_uid


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "sandbox")
    s = p.add_subparsers(dest="sandbox_command", required=True)
    r = s.add_parser("run", help="run COMMAND with WORKSPACE_DIR at /workspace; exits with its exit code")
    r.add_argument("workspace", help="host directory bound read-write at /workspace")
    r.add_argument("--show-options", action="store_true",
                   help="print the bubblewrap options (passed via --args, never argv) to stderr first")
    r.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    r.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    workspace = Path(args.workspace).resolve()
    if not argv:
        print("error: give a command after --, e.g. draligned sandbox run DIR -- env", file=sys.stderr)
        return 2
    if not workspace.is_dir():
        print(f"error: {workspace} is not a directory", file=sys.stderr)
        return 2
    uid = sandbox_uid()
    if uid is not None and os.stat(workspace).st_uid != uid:
        print(f"note: you are root, so the sandbox runs as uid {uid} (nobody); {workspace} is not owned by it, "
              f"so writes to /workspace may fail (chown {uid}:{uid} it to allow them)", file=sys.stderr)
    if args.show_options:
        print(" ".join(bwrap_options(workspace)), file=sys.stderr)
    limits = SandboxLimits.from_contract(load_contract("H-W").contract.limits)
    try:
        result = asyncio.run(run_in_sandbox(workspace, argv, limits))
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.truncated:
        print(f"[output truncated: {len(result.stdout) + len(result.stderr)} of {result.total_chars} characters "
              f"shown (cap {limits.output_chars})]", file=sys.stderr)
    if result.timed_out:
        print(f"[timed out after {limits.timeout_s} s; the command was killed]", file=sys.stderr)
    return result.exit_code if result.exit_code >= 0 else 128 - result.exit_code
