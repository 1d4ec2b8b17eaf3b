"""How long does a ``scopemem`` process take to start, against Python's own start?

    python benchmarks/startup_bench.py [--runs 15] [--warmup 2]

Times whole processes from outside (start to exit, imports and set-up included), each
command ``--runs`` times after ``--warmup`` runs that are not counted, in turn (A B C A B
C …, so a machine that slows down mid-run slows every command alike):

* ``python -c pass``: the yardstick, Python's start in this environment (its ``site``
  included: with scopemem installed editable, ``pip install -e``, that is the editable
  finder's imports, pathlib, re and more, which a regular install does not pay at start);
* ``python -S -c pass``: Python's start without ``site``, the interpreter alone;
* ``python -c "import scopemem"``: the package an integrator imports;
* ``scopemem --help``: the command line with every plugin's commands listed;
* ``scopemem hook user-prompt-submit`` with memory disabled (the hook answers nothing);
* the same hook with the SQLite store on a temporary data directory holding one lesson
  (the hook reads the store and prints the block).

Prints each command's median wall time (and min and max, to show the spread) and its
median ratios to ``python -c pass`` and to ``python -S -c pass``, the ratios taken run by
run. The command line and the hook are meant to stay within 5x ``python -c pass``. Nothing
here asserts: it prints figures.

Runs with bytecode caching on (as an installed package has it), whatever
``PYTHONDONTWRITEBYTECODE`` says.

Path measured: process start-up and the imports each command makes; the hook's store work
(a few milliseconds) is inside the last figure. It does not measure a warm process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROMPT = {
    "session_id": "2f1c9a52-7d1e-4b8e-9a34-0c5d9e8f7a61",
    "transcript_path": "/nonexistent/transcript.jsonl",
    "cwd": "/nonexistent",
    "permission_mode": "default",
    "hook_event_name": "UserPromptSubmit",
    "prompt": "why do the integration tests fail on a fresh checkout?",
}


def write_configs(directory: Path) -> tuple[Path, Path]:
    """Two configuration files: memory off, and the SQLite store in ``directory``."""
    off = directory / "off.toml"
    off.write_text("[memory]\nenabled = false\n", encoding="utf-8")
    sqlite = directory / "sqlite.toml"
    sqlite.write_text(f"""
[memory]
enabled = true
organization = "acme"
store = "sqlite"
admins = ["user:cli:local"]

[memory.stores.sqlite]
path = "{directory / 'data'}"

[memory.hooks]
subject = "alice"
state_dir = "{directory / 'state'}"
""", encoding="utf-8")
    return off, sqlite


def run(argv: list[str], stdin: bytes, env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, input=stdin, capture_output=True, env=env, cwd=cwd,
                            check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {result.returncode}: "
                         f"{result.stderr.decode(errors='replace')}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("SCOPEMEM_CONFIG", None)
    # As an installed package runs: its bytecode cached (the warm-up runs write the cache).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    scopemem = [sys.executable, "-m", "scopemem"]
    payload = json.dumps(PROMPT).encode()
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
        directory = Path(tmp)
        off, sqlite = write_configs(directory)
        subprocess.run([*scopemem, "--config", str(sqlite), "remember",
                        "the integration tests need make bootstrap first", "--scope", "org"],
                       check=True, capture_output=True, env=env, cwd=tmp)
        commands: dict[str, tuple[list[str], bytes]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], b""),
            "python -S -c pass": ([sys.executable, "-S", "-c", "pass"], b""),
            "import scopemem": ([sys.executable, "-c", "import scopemem"], b""),
            "scopemem --help": ([*scopemem, "--help"], b""),
            "hook, memory off": ([*scopemem, "--config", str(off), "hook",
                                  "user-prompt-submit"], payload),
            "hook, sqlite": ([*scopemem, "--config", str(sqlite), "hook",
                              "user-prompt-submit"], payload),
        }
        argv, stdin = commands["hook, sqlite"]
        shown = subprocess.run(argv, input=stdin, capture_output=True, env=env, cwd=tmp,
                               check=True)
        if b"make bootstrap first" not in shown.stdout:
            raise SystemExit(f"the hook did not print the lesson: {shown.stdout!r}")
        times: dict[str, list[float]] = {name: [] for name in commands}
        for index in range(args.warmup + args.runs):
            for name, (argv, stdin) in commands.items():
                elapsed = run(argv, stdin, env, tmp)
                if index >= args.warmup:
                    times[name].append(elapsed)

    print(f"{'command':<20} {'median ms':>10} {'min':>7} {'max':>7} {'x python':>9} "
          f"{'x python -S':>12}")
    for name, values in times.items():
        ratios = [statistics.median(value / yardstick for value, yardstick in zip(
            values, times[base], strict=True)) for base in ("python -c pass", "python -S -c pass")]
        print(f"{name:<20} {statistics.median(values) * 1000:>10.1f} "
              f"{min(values) * 1000:>7.1f} {max(values) * 1000:>7.1f} {ratios[0]:>9.2f} "
              f"{ratios[1]:>12.2f}")


if __name__ == "__main__":
    main()
